"""Several `eridiffusion` commands in one Python process, one call of the command line's main() after
the other: `python -m devkit.command_batch COMMANDS.json RESULTS.json`, each command a list of its
arguments, each result [exit status, what it printed on stderr]. A test of many commands that stop
early (refusals) pays the start of torch and ComfyUI (~10 s of each `python -m eridiffusion`) once."""

import contextlib
import io
import json
import sys


def run_commands(commands):
    from eridiffusion.headless.cli import main

    results = []
    for argv in commands:
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            status = main(argv)
        results.append([status, stderr.getvalue()])
    return results


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        commands = json.load(f)
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(run_commands(commands), f)
