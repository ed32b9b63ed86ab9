"""Batches: random, never mixing buckets, always full (so a global micro-batch splits evenly over
the processes of a run, each part of one shape)."""

import collections

import torch

from eridiffusion.training.data.batches import BatchSampler
from eridiffusion.training.data.training_data import TrainingData, TrainingSample
from eridiffusion.training.run.distributed import SINGLE_PROCESS, TrainingProcesses, _buckets


def data_of(buckets):
    """TrainingData of samples whose buckets are `buckets` (one entry per sample)."""
    samples = [TrainingSample(f"{i}.png", torch.zeros(4, 8, 8), [], size) for i, size in enumerate(buckets)]
    return TrainingData(samples, [], 0.0, 1, 64, "test")


def test_every_batch_is_full_and_of_one_bucket_and_every_sample_comes_each_epoch():
    data = data_of([(64, 64)] * 5 + [(64, 128)] * 2)
    sampler = BatchSampler(data, 4, seed=0)
    epoch = [sampler.next() for _ in range(3)]  # 5 -> 2 batches, 2 -> 1 batch
    assert sampler.pending == []
    assert all(len(batch) == 4 for batch in epoch)
    assert all(len({data.samples[i].bucket for i in batch}) == 1 for batch in epoch)
    counts = collections.Counter(i for batch in epoch for i in batch)
    assert set(counts) == set(range(7))
    # 5 samples fill 8 places: 3 come twice; 2 samples fill 4: both twice
    assert sorted(counts[i] for i in range(5)) == [1, 1, 2, 2, 2]
    assert counts[5] == counts[6] == 2


def test_filling_up_leaves_the_order_of_the_batches_as_it_was():
    """Batches as the version that did not fill them up drew them (seed 3): the same where a
    bucket divides into batches; a short one ([1], [4]) filled up from its bucket's order."""
    divides = BatchSampler(data_of([(64, 64)] * 4 + [(64, 128)] * 2), 2, seed=3)
    assert [divides.next() for _ in range(6)] == [[4, 5], [2, 1], [3, 0], [2, 0], [1, 3], [4, 5]]
    short = BatchSampler(data_of([(64, 64)] * 5), 2, seed=3)
    assert [short.next() for _ in range(6)] == [[1, 0], [0, 2], [3, 4], [4, 3], [3, 2], [1, 0]]


def test_a_short_batch_from_an_older_state_is_filled_from_itself():
    sampler = BatchSampler(data_of([(64, 64)] * 3), 4, seed=0)
    sampler.load_state({"generator": sampler.generator.getstate(), "pending": [[2, 0, 1]]})
    assert sampler.next() == [2, 0, 1, 2]


def test_each_process_takes_its_slice_of_the_global_batch():
    batch = [7, 3, 5, 1, 2, 0]
    parts = [batch[TrainingProcesses(rank, 3).part(batch)] for rank in range(3)]
    assert parts == [[7, 3], [5, 1], [2, 0]]
    assert batch[SINGLE_PROCESS.part(batch)] == batch


def test_gradient_buckets_hold_one_dtype_and_device_up_to_the_size_limit():
    tensors = [torch.zeros(10), torch.zeros(10), torch.zeros(30), torch.zeros(5, dtype=torch.float16), torch.zeros(1)]
    sizes = [[t.numel() for t in bucket] for bucket in _buckets(tensors, 100)]
    assert sizes == [[10, 10], [30], [5], [1]]
