"""The socket types EriDiffusion's nodes pass between each other (prefixed: other packs use plain names)."""

from comfy_api.latest import io

Dataset = io.Custom("ERI_DATASET")
TrainingData = io.Custom("ERI_TRAINING_DATA")
SampleConfig = io.Custom("ERI_SAMPLE_CONFIG")
LoRA = io.Custom("ERI_LORA")
Loss = io.Custom("ERI_LOSS")
Resume = io.Custom("ERI_RESUME")
Objective = io.Custom("ERI_OBJECTIVE")
AdapterOptions = io.Custom("ERI_ADAPTER_OPTIONS")
OptimizerOptions = io.Custom("ERI_OPTIMIZER_OPTIONS")
MemoryOptions = io.Custom("ERI_MEMORY_OPTIONS")
CheckpointOptions = io.Custom("ERI_CHECKPOINT_OPTIONS")
ValidationOptions = io.Custom("ERI_VALIDATION_OPTIONS")
TrainingExtras = io.Custom("ERI_TRAINING_EXTRAS")
DatasetMediaOptions = io.Custom("ERI_DATASET_MEDIA_OPTIONS")
CacheMediaOptions = io.Custom("ERI_CACHE_MEDIA_OPTIONS")
SampleMediaOptions = io.Custom("ERI_SAMPLE_MEDIA_OPTIONS")

CATEGORY = "EriDiffusion"
