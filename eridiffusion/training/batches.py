"""Which samples each micro-batch trains on: random batches that never mix buckets."""

import random


class BatchSampler:
    """Random batches that never mix buckets; reshuffled each epoch. Host-side randomness is
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
            batches += [shuffled[i : i + self.batch_size] for i in range(0, len(shuffled), self.batch_size)]
        self.generator.shuffle(batches)
        self.pending = batches

    def next(self):
        if not self.pending:
            self._refill()
        return self.pending.pop()

    def state(self):
        return {"generator": self.generator.getstate(), "pending": [list(b) for b in self.pending]}

    def load_state(self, state):
        self.generator.setstate(state["generator"])
        self.pending = [list(b) for b in state["pending"]]
