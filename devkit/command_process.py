"""One Python process of the command line that runs `eridiffusion` commands one after the other (its
main() once for each), for a test module's commands that stop early and its short runs: the start of torch and ComfyUI
(~4-10 s of each `python -m eridiffusion`) is paid once. `python -m devkit.command_process` reads one
JSON request a line on stdin ({"argv", "cwd"}) and answers each on the stdout it started with:
{"returncode", "stdout", "stderr"}."""

import contextlib
import io
import json
import os
import select
import subprocess
import sys
from types import SimpleNamespace


class CommandProcess:
    """The running process; run(*args, cwd) is run_cli's CompletedProcess (returncode, stdout, stderr) of
    the command, main()'s return value (or argparse's exit status) standing for the exit status."""

    def __init__(self, env):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "devkit.command_process"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, *args, cwd, timeout=600):
        self.process.stdin.write(json.dumps({"argv": list(map(str, args)), "cwd": str(cwd)}) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        assert ready, f"eridiffusion {' '.join(map(str, args))} did not finish in {timeout} s"
        line = self.process.stdout.readline()
        assert line, f"the command process exited (status {self.process.wait()}) running {args}"
        return SimpleNamespace(**json.loads(line))

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


def _serve():
    from eridiffusion.headless.cli import main

    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # whatever else writes to stdout cannot break an answer
    for line in sys.stdin:
        request = json.loads(line)
        os.chdir(request["cwd"])
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                status = main(request["argv"])
            except SystemExit as exit:  # argparse's refusals
                status = exit.code
        answers.write(json.dumps({"returncode": status, "stdout": stdout.getvalue(), "stderr": stderr.getvalue()}))
        answers.write("\n")
        answers.flush()


if __name__ == "__main__":
    _serve()
