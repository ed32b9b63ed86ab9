"""The command line: `eridiffusion train CONFIG.yaml [--output DIR] [--resume auto|CHECKPOINT]
[--gpus N] [--print-config | --dry-run]` (also `python -m eridiffusion train ...`, and under torchrun:
`torchrun --standalone --nproc_per_node=N -m eridiffusion train ...`), and `eridiffusion lora <verb>`
(lora_cli.py)."""

import argparse
import logging
import os
import shutil
import sys
import tempfile

from ..errors import EriDiffusionError
from ..host import HostNotFound
from .lora_cli import add_lora_parser, run_lora

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130  # the shell's status for Ctrl-C, so a script that queues runs stops too


def parser():
    root = argparse.ArgumentParser(
        prog="eridiffusion",
        description="Train LoRA-family adapters on ComfyUI's models from a config file, without a browser; "
        "inspect, resize, merge and extract LoRA files.",
    )
    commands = root.add_subparsers(dest="command", required=True)
    train = commands.add_parser(
        "train",
        help="train from a config file",
        description="Train from a YAML config: EriDiffusion's sections (named after the nodes whose inputs "
        "they hold) or ai-toolkit's format (job: extension). Relative paths in the file are "
        "relative to the file that writes them.",
    )
    train.add_argument("config", help="the YAML config file")
    train.add_argument(
        "--output",
        help="ComfyUI's output folder for the run: it writes OUTPUT/<run_name>/ and "
        "OUTPUT/loras/<filename_prefix>.safetensors (default: the config's "
        "output:, else ./output)",
    )
    train.add_argument(
        "--resume",
        metavar="auto|CHECKPOINT",
        help="continue the run: auto takes its newest checkpoint in the output folder; or give "
        "a checkpoint (relative: in the output folder, then in its loras/)",
    )
    train.add_argument(
        "--gpus",
        type=_positive,
        metavar="N",
        help="train on N GPUs of this machine, one process each (the command runs itself again under torchrun); "
        "a run started by torchrun itself leaves this out",
    )
    mode = train.add_mutually_exclusive_group()
    mode.add_argument(
        "--print-config",
        action="store_true",
        help="print the complete config (every default filled, ai-toolkit files in EriDiffusion's sections) and exit",
    )
    mode.add_argument(
        "--dry-run",
        action="store_true",
        help="check the config, load the model and the dataset, print the plan and exit",
    )
    add_lora_parser(commands)
    return root


def _positive(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of GPUs, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more (got {value})")
    return value


class _ThirdPartyNoise(logging.Filter):
    """Warnings other packages log when imported that say nothing about the run: ComfyUI's note that
    torchaudio is missing (audio models only), bitsandbytes' optional CPU kernels."""

    NOISE = ("torchaudio missing", "Failed to load CPU gemm_4bit")

    def filter(self, record):
        return not record.getMessage().startswith(self.NOISE)


def quiet_third_party_warnings():
    logging.getLogger().addFilter(_ThirdPartyNoise())
    logging.getLogger("bitsandbytes.backends.cpu.ops").addFilter(_ThirdPartyNoise())


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    quiet_third_party_warnings()
    if args.command == "lora":
        return _lora(args)
    name = "eridiffusion"
    try:
        from ..training.run.distributed import join_processes, under_torchrun

        if args.gpus and not (args.print_config or args.dry_run):
            import torch

            from .launch import become_torchrun, check_gpus

            check_gpus(args.gpus, torch.cuda.device_count(), under_torchrun())
            if args.gpus > 1:
                become_torchrun(args)  # this process becomes torchrun: nothing below runs

        processes = join_processes()  # before ComfyUI is imported: it takes the current GPU as its device
    except EriDiffusionError as error:
        print(f"{name}: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    if processes.distributed and not processes.is_main:
        name = f"eridiffusion (process {processes.rank} of {processes.world_size})"
        logging.getLogger().setLevel(logging.ERROR)  # rank 0 alone talks to the terminal
    host_folders = tempfile.mkdtemp(prefix="eridiffusion-host-")  # ComfyUI's input and temp, for this run only
    try:
        status = _train(args, host_folders, processes)
    except (EriDiffusionError, HostNotFound) as error:
        print(f"{name}: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"{name}: aborted (checkpoints written so far are kept)", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        shutil.rmtree(host_folders, ignore_errors=True)
    processes.close()  # after a run that ended in every process (a failed one leaves the others to torchrun)
    return status


def _lora(args):
    from ..runtime import start_host

    host_folders = tempfile.mkdtemp(prefix="eridiffusion-host-")
    try:
        start_host(host_folders)  # the LoRA keys and the writer come from ComfyUI's modules
        print("\n".join(run_lora(args)))
    except (EriDiffusionError, HostNotFound) as error:
        print(f"eridiffusion lora {args.verb}: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        shutil.rmtree(host_folders, ignore_errors=True)
    return 0


def _train(args, host_folders, processes):
    from ..runtime import start_host

    start_host(host_folders)
    from .run_config import config_yaml, load_run_config

    config = load_run_config(args.config)
    if config.unsupported and processes.is_main:
        print(
            f"eridiffusion: warning: {len(config.unsupported)} setting(s) of {args.config} are not supported "
            "yet and do not apply as written:\n  " + "\n  ".join(config.unsupported),
            file=sys.stderr,
        )
    if args.print_config:
        if processes.is_main:
            print(config_yaml(config), end="")
        return 0
    from . import run

    if args.output is not None and not args.output.strip():
        raise EriDiffusionError("--output is empty: give the output folder (or leave --output out for ./output).")
    if args.resume is not None and not args.resume.strip():
        raise EriDiffusionError("--resume is empty: give auto (the run's newest checkpoint) or a checkpoint's path.")
    output = os.path.abspath(args.output or config.output or "output")
    run.use_output_folder(output)
    if args.dry_run:
        from .plan import plan_lines

        if processes.is_main:
            request, inputs = run.requested_run(config, args.resume, output)
            count = max(args.gpus or 1, processes.world_size)
            print("\n".join(plan_lines(config, inputs, request.config, output, processes=count)))
        return 0
    return EXIT_INTERRUPTED if run.train_from_config(config, args.resume, processes) else 0
