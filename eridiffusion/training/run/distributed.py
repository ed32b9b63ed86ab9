"""Data-parallel training over the processes torchrun starts on one machine (one per GPU; gloo on
the CPU): which process this is, and the few collective steps a run takes — adapter gradients
averaged once per optimizer step, agreement on stopping, rank 0's decisions handed to the others,
and barriers while rank 0 alone writes files.

Why not torch's DistributedDataParallel: DDP wraps a module, runs its forward and hooks each
parameter's gradient accumulation to all-reduce buckets while backward runs. Here the adapters are
injected into ComfyUI's model (the forward is ComfyUI's `apply_model`, no module of ours), a
micro-batch's forward and backward may be one CUDA-graph replay (no per-parameter hooks a
captured graph could hold), and DDP would broadcast every parameter and buffer of what it wraps at
start (a wrapper around ComfyUI's model: the frozen weights, gigabytes). What DDP amounts to with
`no_sync` during gradient accumulation — gradients summed locally over the micro-batches, then
averaged across processes once, in buckets, before the optimizer step — is done explicitly after the
last micro-batch, outside any captured graph. What that gives up is DDP's overlap of the all-reduce
with backward: adapter gradients are tens of MB, a few milliseconds over NVLink.
"""

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from ...errors import EriDiffusionError

# Gradients are averaged in flat buckets of about this size (DDP's default bucket_cap_mb).
BUCKET_BYTES = 25 * 2**20
# How long a process waits at a host barrier while rank 0 writes a checkpoint or renders samples
# (a video model's samples take minutes; the default 30 would cut a long render short).
HOST_TIMEOUT = timedelta(hours=2)


@dataclass(frozen=True)
class TrainingProcesses:
    """This process's place among the processes of one run. The default is a run of one process,
    where every collective step is a no-op."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    # torch.distributed groups: `devices` averages the gradients (NCCL on CUDA, gloo on the CPU);
    # `host` (gloo) agrees on host-side values, so waiting for rank 0 never holds a device collective.
    devices: object = None
    host: object = None

    @property
    def distributed(self):
        return self.world_size > 1

    @property
    def is_main(self):
        """Rank 0: the process that writes the run's files and talks to the terminal."""
        return self.rank == 0

    def part(self, global_batch):
        """This process's slice of a global micro-batch of world_size x batch_size samples."""
        size = len(global_batch) // self.world_size
        return slice(self.rank * size, (self.rank + 1) * size)

    def average_gradients(self, parameters, loss):
        """Average the gradients of `parameters` and the step's `loss` (a device scalar) over the
        processes, in buckets of one all-reduce each; returns the averaged loss. A parameter without
        a gradient counts as zeros, so every process sends buckets of one layout. A sharded one's
        (sharding fsdp) arrived averaged: FSDP reduce-scatters it as backward leaves its layer."""
        if not self.distributed:
            return loss
        import torch.distributed as dist

        tensors = []
        for p in _replicated(parameters):
            if not p.requires_grad:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            tensors.append(p.grad)
        loss = loss.detach().reshape(1).clone()
        tensors.append(loss)
        pending = []
        for bucket in _buckets(tensors, BUCKET_BYTES):
            flat = _flatten_dense_tensors(bucket)
            pending.append((bucket, flat, dist.all_reduce(flat, group=self._group_for(flat), async_op=True)))
        for bucket, flat, work in pending:
            work.wait()  # on CUDA: the current stream waits for the all-reduce; the host does not
            flat.div_(self.world_size)
            # one multi-tensor copy per bucket: a copy per gradient would be a launch per adapter tensor
            torch._foreach_copy_(bucket, _unflatten_dense_tensors(flat, bucket))
        return loss[0]

    def broadcast_parameters(self, parameters):
        """Rank 0's values of `parameters` in every process (as DDP does at start). Sharded ones (sharding
        fsdp) are each process's part of the model's weights, which every process loaded alike."""
        if not self.distributed:
            return
        import torch.distributed as dist

        with torch.no_grad():
            for bucket in _buckets(_replicated(parameters), BUCKET_BYTES):
                flat = torch.cat([p.detach().reshape(-1) for p in bucket])
                dist.broadcast(flat, src=0, group=self._group_for(flat))
                offset = 0
                for p in bucket:
                    p.copy_(flat[offset : offset + p.numel()].view_as(p))
                    offset += p.numel()

    def _group_for(self, tensor):
        # NCCL reduces GPU tensors only; adapters of a text encoder ComfyUI keeps on the CPU go by gloo
        return self.host if tensor.device.type == "cpu" else self.devices

    def any(self, flag):
        """True in every process when `flag` is true in one (a stop asked for in any process)."""
        if not self.distributed:
            return bool(flag)
        import torch.distributed as dist

        value = torch.tensor([1 if flag else 0], dtype=torch.int32)
        dist.all_reduce(value, op=dist.ReduceOp.MAX, group=self.host)
        return bool(value[0])

    def barrier(self):
        """Wait until every process got here (the others wait while rank 0 writes)."""
        if self.distributed:
            import torch.distributed as dist

            dist.barrier(group=self.host)

    def decided_by_main(self, decide):
        """decide() run by rank 0 alone, its result handed to every process (a run folder's name,
        the checkpoint --resume auto picks). An EriDiffusionError it raises is raised in every process."""
        if not self.distributed:
            return decide()
        import torch.distributed as dist

        box: list[tuple[str, Any] | None] = [None]  # rank 0's (kind, value), broadcast to the others
        if self.is_main:
            try:
                box = [("value", decide())]
            except EriDiffusionError as error:
                box = [("error", str(error))]
        dist.broadcast_object_list(box, src=0, group=self.host)
        assert box[0] is not None  # the broadcast filled it in
        kind, value = box[0]
        if kind == "error":
            raise EriDiffusionError(value)
        return value

    def gather(self, value):
        """[value of rank 0, value of rank 1, ...] in every process (small host values)."""
        if not self.distributed:
            return [value]
        import torch.distributed as dist

        values = [None] * self.world_size
        dist.all_gather_object(values, value, group=self.host)
        return values

    def close(self):
        if self.distributed:
            import torch.distributed as dist

            dist.destroy_process_group()


SINGLE_PROCESS = TrainingProcesses()


def _replicated(parameters):
    """Those of `parameters` that every process holds whole (not FSDP's DTensor shards)."""
    from torch.distributed.tensor import DTensor

    return [p for p in parameters if not isinstance(p, DTensor)]


def _buckets(tensors, limit):
    """Consecutive runs of `tensors` of one dtype and device, each up to `limit` bytes (a larger
    tensor is a bucket of its own)."""
    bucket: list[torch.Tensor] = []
    size = 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        if bucket and (size + nbytes > limit or t.dtype != bucket[0].dtype or t.device != bucket[0].device):
            yield bucket
            bucket, size = [], 0
        bucket.append(t)
        size += nbytes
    if bucket:
        yield bucket


def under_torchrun():
    """Whether torchrun (torch.distributed.run) started this process."""
    return "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ


def join_processes():
    """This process's place among the processes torchrun started (its RANK, LOCAL_RANK and
    WORLD_SIZE), with the process groups made and, on CUDA, the process's GPU (LOCAL_RANK) made
    current. Call before ComfyUI is imported: ComfyUI takes the current GPU as its device. A process
    not started by torchrun, or one of one, is a run of one process."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return SINGLE_PROCESS
    import torch.distributed as dist

    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    if local_size != world_size:
        raise EriDiffusionError(
            f"torchrun started {world_size} processes on {world_size // local_size} machines; EriDiffusion "
            "trains on the GPUs of one machine (its latent cache and run folder are shared through that "
            "machine's disk): run torchrun with --nnodes=1."
        )
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        if local_size > count:
            raise EriDiffusionError(
                f"torchrun started {local_size} processes, but this machine has {count} GPU(s): one process "
                f"trains on one GPU, so start at most {count} (--nproc_per_node, or eridiffusion train --gpus)."
            )
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
        host = dist.new_group(backend="gloo", timeout=HOST_TIMEOUT)
    else:  # the CPU: gloo does both (useful for testing; a real model wants GPUs)
        dist.init_process_group("gloo", timeout=HOST_TIMEOUT)
        host = dist.group.WORLD
    return TrainingProcesses(rank, world_size, local_rank, dist.group.WORLD, host)
