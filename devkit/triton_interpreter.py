"""Triton kernels run on the CPU through Triton's interpreter. Triton reads TRITON_INTERPRET when it
is imported, so the kernels run in a process of their own: `script` loads the kernel module from
the path in sys.argv[1], reads its cases as JSON on stdin and prints its results as JSON."""

import json
import os
import subprocess
import sys

# the preamble of such a script: the kernel module, loaded from its file as `kernels`
LOAD_KERNELS = """
import importlib.util, json, sys
import torch, triton
spec = importlib.util.spec_from_file_location("kernels", sys.argv[1])
kernels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernels)
"""


def interpreted(script, kernel_file, cases):
    """What `script` (after LOAD_KERNELS) prints for `cases`, parsed; fails the test with the
    script's error output if it fails."""
    run = subprocess.run(
        [sys.executable, "-c", LOAD_KERNELS + script, kernel_file],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        env=dict(os.environ, TRITON_INTERPRET="1"),
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)
