"""The command line: `eridiffusion train CONFIG.yaml [--output DIR] [--resume auto|CHECKPOINT]
[--print-config | --dry-run]` (also `python -m eridiffusion train ...`)."""

import argparse
import os
import shutil
import sys
import tempfile

from ..host import HostNotFound
from ..training.errors import EriDiffusionError

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130  # the shell's status for Ctrl-C, so a script that queues runs stops too


def parser():
    root = argparse.ArgumentParser(
        prog="eridiffusion",
        description="Train LoRA-family adapters on ComfyUI's models from a config file, without a browser.",
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
    return root


def main(argv=None):
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    host_folders = tempfile.mkdtemp(prefix="eridiffusion-host-")  # ComfyUI's input and temp, for this run only
    try:
        return _train(args, host_folders)
    except (EriDiffusionError, HostNotFound) as error:
        print(f"eridiffusion: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("eridiffusion: aborted (checkpoints written so far are kept)", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        shutil.rmtree(host_folders, ignore_errors=True)


def _train(args, host_folders):
    from ..runtime import start_host

    start_host(host_folders)
    from .run_config import config_yaml, load_run_config

    config = load_run_config(args.config)
    if config.unsupported:
        print(
            f"eridiffusion: warning: {len(config.unsupported)} setting(s) of {args.config} are not supported "
            "yet and do not apply as written:\n  " + "\n  ".join(config.unsupported),
            file=sys.stderr,
        )
    if args.print_config:
        print(config_yaml(config), end="")
        return 0
    from . import run

    output = os.path.abspath(args.output or config.output or "output")
    run.use_output_folder(output)
    if args.dry_run:
        from .plan import plan_lines

        inputs = run.load_inputs(config)
        print("\n".join(plan_lines(config, inputs, run.train_config(config), output)))
        return 0
    return EXIT_INTERRUPTED if run.train_from_config(config, args.resume) else 0
