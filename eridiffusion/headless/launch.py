"""`eridiffusion train CONFIG --gpus N`: the same command again as N processes under torchrun
(`python -m torch.distributed.run`), which this process becomes; torchrun's own environment then
tells each process its rank (training/run/distributed.py)."""

import os
import sys

from ..errors import EriDiffusionError
from ..host import CHECKOUT_DIR


def torchrun_command(config, processes, output=None, resume=None):
    """The command line of a run of `processes` processes on this machine: torch's launcher with a
    rendezvous of its own on a free local port (--standalone), each process `-m eridiffusion train`."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={processes}",
        "-m",
        "eridiffusion",
        "train",
        config,
    ]
    if output:
        command += ["--output", output]
    if resume:
        command += ["--resume", resume]
    return command


def check_gpus(gpus, cuda_devices, started_by_torchrun):
    """Refuse a --gpus the machine cannot honour, naming the fix."""
    if started_by_torchrun:
        raise EriDiffusionError(
            f"--gpus {gpus}: this process was started by torchrun, which already chose the processes; leave --gpus out."
        )
    if cuda_devices == 0 and gpus == 1:
        raise EriDiffusionError("--gpus 1: this machine has no CUDA GPU; leave --gpus out to train on the CPU.")
    if cuda_devices == 0:
        raise EriDiffusionError(
            f"--gpus {gpus}: this machine has no CUDA GPU. To try a run of {gpus} processes on the CPU "
            f"(gloo; for testing, each process holds the whole model), start them yourself: python -m "
            f"torch.distributed.run --standalone --nproc_per_node={gpus} -m eridiffusion train CONFIG"
        )
    if gpus > cuda_devices:
        raise EriDiffusionError(
            f"--gpus {gpus}: this machine has {cuda_devices} CUDA GPU(s); one process trains on one GPU, so "
            f"ask for at most {cuda_devices}."
        )


def become_torchrun(args):
    """Replace this process with torchrun running this command on args.gpus GPUs, check_gpus passed
    (never returns)."""
    command = torchrun_command(args.config, args.gpus, args.output, args.resume)
    # the processes import this very checkout, wherever the command was started from
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (CHECKOUT_DIR, os.environ.get("PYTHONPATH")) if p)}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, command, env)
