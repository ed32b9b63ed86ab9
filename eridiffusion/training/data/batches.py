"""Which samples each micro-batch trains on: random batches that never mix buckets."""

import random


class BatchSampler:
    """Random batches of `batch_size` that never mix buckets; reshuffled each epoch. Every batch is
    full: a bucket whose size is not a multiple of batch_size has its last batch filled up with
    samples of the same bucket from the start of its shuffled order (as torch's DistributedSampler
    pads), so a batch always has one shape and one size. In a run of several processes the batch is
    the global micro-batch, of which each process trains its part. Host-side randomness is
    Python's (not tensors), so choosing a batch never touches the device."""

    def __init__(self, data, batch_size, seed):
        self.groups = list(data.buckets().values())
        self.batch_size = batch_size
        self.generator = random.Random(seed)
        self.pending = []

    def _refill(self):
        batches = []
        for indices in self.groups:
            shuffled = list(indices)
            self.generator.shuffle(shuffled)
            shuffled += [shuffled[i % len(shuffled)] for i in range(-len(shuffled) % self.batch_size)]
            batches += [shuffled[i : i + self.batch_size] for i in range(0, len(shuffled), self.batch_size)]
        self.generator.shuffle(batches)
        self.pending = batches

    def next(self):
        if not self.pending:
            self._refill()
        batch = self.pending.pop()
        # a short batch can come from a state file of an earlier version, which did not fill them up
        return batch + [batch[i % len(batch)] for i in range(self.batch_size - len(batch))]

    def state(self):
        return {"generator": self.generator.getstate(), "pending": [list(b) for b in self.pending]}

    def load_state(self, state):
        self.generator.setstate(state["generator"])
        self.pending = [list(b) for b in state["pending"]]
