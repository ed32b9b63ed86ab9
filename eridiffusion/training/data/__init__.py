"""The data room: dataset folders and their media, captions, aspect buckets, batches, and the
latent cache that encodes them once."""
