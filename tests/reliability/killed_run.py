"""The runs test_killed_runs.py kills. `python -m tests.reliability.killed_run BASE` starts torch, ComfyUI (its
folders under BASE) and the trainer once, then forks one run per request, so each trial pays only its run,
not the ~20 s of a fresh interpreter's imports. Requests, one a line on stdin, each answered with one line:
- `start DATASET RUN_NAME LOG`: a child process trains a tiny SD1.5 with a checkpoint every step until it
  is killed (its stdout and stderr to LOG); with DATASET "-" it only starts a run (what sweeps the temp files
  killed runs left) and exits. Answers the child's pid.
- `poll PID`: its exit status if it has exited (a signal's as its negative), else "running".
- `wait PID`: waits for it to exit; answers its exit status."""

import os
import sys


def train(base, dataset, run_name):
    import folder_paths
    import torch

    from devkit.tiny_models import build_tiny
    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.data.dataset import load_dataset
    from eridiffusion.training.data.training_data import build_training_data
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.run_folder import unique_run_dir
    from eridiffusion.training.run.trainer import train_lora

    run_dir = unique_run_dir(folder_paths.get_output_directory(), run_name)
    if dataset == "-":
        os.rmdir(run_dir)
        return
    model, clip, vae = build_tiny("sd15", seed=0)
    with torch.inference_mode():
        data = build_training_data(load_dataset(dataset), vae, clip, 64, os.path.join(base, "cache"))
    config = TrainConfig(
        gradient_checkpointing=False,
        steps=100000,
        learning_rate=1e-3,
        dtype="fp32",
        save_every=1,
        keep_last=3,
        log_every=1,
        eval_images=1,
        eval_timesteps=1,
        run_name=run_name,
        adapter=AdapterSpec(rank=4, alpha=4.0, targets="all-linear"),
    )
    with torch.inference_mode(False):
        train_lora(model, data, config, run_dir)


def status(code):
    """os.waitpid's status as an exit status: a signal's as its negative."""
    return -os.WTERMSIG(code) if os.WIFSIGNALED(code) else os.WEXITSTATUS(code)


def child(base, dataset, run_name, log):
    """In the forked process: train, with stdout and stderr to `log`, then leave without the parent's exit
    handlers."""
    import time

    from eridiffusion.formats import atomic_file

    # (the server imported it: a fresh process's start, which its sweep of the temp files that runs killed
    # before it left compares their times with, is this fork's)
    atomic_file.PROCESS_START = time.time()
    code = 1
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1), os.dup2(fd, 2), os.close(fd)
        os.close(0)
        train(base, dataset, run_name)
        code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)


def serve(base):
    from eridiffusion.runtime import start_host

    start_host(base)
    import devkit.tiny_models  # noqa: F401  (what each run imports, imported once before the forks)
    import eridiffusion.training.run.trainer  # noqa: F401

    for line in sys.stdin:
        request, *args = line.split()
        if request == "start":
            pid = os.fork()
            if pid == 0:
                child(base, *args)
            answer = pid
        elif request == "poll":
            pid, code = os.waitpid(int(args[0]), os.WNOHANG)
            answer = "running" if pid == 0 else status(code)
        elif request == "wait":
            answer = status(os.waitpid(int(args[0]), 0)[1])
        else:
            raise ValueError(f"unknown request {line!r}: start, poll or wait")
        sys.stdout.write(f"{answer}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve(sys.argv[1])
