"""What the benchmarks that run a peer trainer beside ours share (kohya_sdxl_train.py, musubi_block_swap.py)."""

import dataclasses
import glob
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def peer_root(env_var, tree):
    """The peer's exported tree that env_var names, as an absolute path; refused when env_var is not set."""
    root = os.environ.get(env_var)
    if not root:  # "this file": the benchmark that was run, whose docstring says how to export the tree
        raise SystemExit(f"{env_var}=path to an exported {tree} tree (this file's docstring says how)")
    return os.path.abspath(root)


def plan_settings(default_plan, default_timeout_s):
    """(the experiments, steps, warmup steps, seconds one experiment may take, the folder for the results) from PLAN
    (comma-separated), STEPS, WARMUP, TIMEOUT_S and OUT."""
    plan = [p for p in os.environ.get("PLAN", default_plan).split(",") if p]
    steps, warmup = int(os.environ.get("STEPS", "14")), int(os.environ.get("WARMUP", "4"))
    timeout_s = int(os.environ.get("TIMEOUT_S", str(default_timeout_s)))
    return plan, steps, warmup, timeout_s, os.environ.get("OUT", tempfile.gettempdir())


def exported_commit(root):
    """The commit a peer's tree was exported at (its COMMIT file); None if it has none."""
    commit_file = os.path.join(root, "COMMIT")
    return open(commit_file).read().strip() if os.path.exists(commit_file) else None


def peer_site(root, name):
    """The wheels in root/wheels installed (once per machine) into a folder of their own, <temp>/<name>-site, so
    that they never enter the image's packages that our benchmarks use; None if root carries none."""
    wheels = sorted(glob.glob(os.path.join(root, "wheels", "*.whl")))
    if not wheels:
        return None
    site = os.path.join(tempfile.gettempdir(), f"{name}-site")
    if not os.path.exists(os.path.join(site, ".installed")):
        pip = "-m pip install -q --no-deps --no-index --no-compile --upgrade --target".split()
        subprocess.run([sys.executable, *pip, site, *wheels], check=True)
        open(os.path.join(site, ".installed"), "w").close()
    return site


def check_imports(paths, needs, peer_name, env_var):
    """Refuse before anything is written when a package the peer imports (`needs`) is not on `paths` or the
    image's own; env_var names the peer's tree, whose wheels/ folder would bring it."""
    import importlib.util

    sys.path[:0] = paths
    try:
        missing = [name for name in needs if importlib.util.find_spec(name) is None]
    finally:
        del sys.path[: len(paths)]
    if missing:  # "this file": the benchmark that was run
        raise SystemExit(
            f"{peer_name} needs {', '.join(missing)}: add their wheels to ${env_var}/wheels "
            "(this file's docstring lists the ones the GPU image lacks)"
        )


def write_weights(family):
    """bench/train_speed.py's file of `family`, written with ComfyUI's own model class (random_weights_file's
    process)."""
    from bench import train_speed

    train_speed.stub_pyav()
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-bench-")
    train_speed.weights_file(family)


def random_weights_file(family):
    """bench/train_speed.py's file of `family` (random bf16 weights, ComfyUI's keys), written once per machine in a
    process of its own so that this one never holds the GPU."""
    path = os.path.join(tempfile.gettempdir(), f"eridiffusion_bench_{family}.safetensors")  # train_speed.weights_file's
    if not os.path.exists(path):
        writer = multiprocessing.get_context("spawn").Process(target=write_weights, args=(family,))
        writer.start()
        writer.join()
        if writer.exitcode != 0 or not os.path.exists(path):
            raise SystemExit(f"writing {path} failed (exit {writer.exitcode}): run under bench/gpu_host.sh")
    return path


def experiment_number(parts, prefix, kind):
    """The number after `prefix` in one of an experiment name's parts (cap24 → 24.0 as a float); None if none."""
    return next((kind(p[len(prefix) :]) for p in parts if p.startswith(prefix) and p[len(prefix) :]), None)


def command_line(options):
    """The peer's argparse arguments for `options`: --name for True, --name value for a value, nothing for None and
    False."""
    argv = []
    for name, value in options.items():
        if value is True:
            argv.append(f"--{name}")
        elif value is not None and value is not False:  # (0 == False: `not in (None, False)` dropped --seed 0)
            argv += [f"--{name}", str(value)]
    return argv


class StepRecord:
    """Inside the peer's process: what its hooks measure, saved to a JSON file after each change, so that a timeout
    or a crash leaves what was reached for PeerRun to read: the device, when training starts, when each optimizer
    step ends (after a device synchronize) and the peak memory since the start."""

    def __init__(self, path, cap_gib):
        """Caps this process's GPU memory at cap_gib GiB (None: uncapped), as a card of that size."""
        import torch

        self.path = path
        self.cuda = torch.cuda.is_available()
        self.values = {"step_ends": []}
        if self.cuda:
            total = torch.cuda.get_device_properties(0).total_memory
            self.values.update(device=torch.cuda.get_device_name(0), total_GiB=total / 2**30)
            if cap_gib:
                torch.cuda.set_per_process_memory_fraction(cap_gib * 2**30 / total)

    def save(self):
        with open(self.path + ".tmp", "w") as f:
            json.dump(self.values, f)
        os.replace(self.path + ".tmp", self.path)

    def note(self, **values):
        self.values.update(values)
        self.save()

    def training_started(self, allocated=False):
        """The peak memory reset and the clock's start; allocated: also the memory then (weights and state)."""
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            if allocated:
                self.values["allocated_at_start_GiB"] = torch.cuda.memory_allocated() / 2**30
        self.values["train_start"] = time.perf_counter()
        self.save()

    def step_ended(self):
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            self.values.update(
                peak_GiB=torch.cuda.max_memory_allocated() / 2**30,
                peak_reserved_GiB=torch.cuda.max_memory_reserved() / 2**30,
            )
        self.values["step_ends"].append(time.perf_counter())
        self.save()


@dataclasses.dataclass
class PeerRun:
    """What one experiment's process left: its exit code ("timeout" when stopped), its output, the StepRecord it
    saved ({} if none) and the seconds it took."""

    code: int | str
    log: str
    record: dict
    wall_s: float

    @property
    def step_times(self):
        """The intervals from training's start to each optimizer step's end, step by step."""
        ends = [self.record["train_start"], *self.record["step_ends"]] if "train_start" in self.record else []
        return [b - a for a, b in zip(ends, ends[1:])]

    def measured(self):
        """The step times, device and peak memory, under the RESULT keys the benchmarks share."""
        times = self.step_times
        return {
            "steps_done": len(times),
            "step_times_s": [round(t, 4) for t in times],
            "device": self.record.get("device"),
            "peak_GiB": self.record.get("peak_GiB"),
            "peak_reserved_GiB": self.record.get("peak_reserved_GiB"),
        }

    def speed(self, warmup, per_second):
        """s/step (the median of the step times after `warmup` steps) with its inverse under the key `per_second`,
        the peer's progress bar's s/it beside it as a check (its average counts the first step but not its time),
        and the error when the process failed."""
        times, r = self.step_times, {}
        if len(times) > warmup:
            r["s_per_step"] = statistics.median(times[warmup:])
            r["steps_timed"] = len(times) - warmup
            r[per_second] = 1 / r["s_per_step"]
        tqdm = re.findall(r"steps:[^\r\n]*?(\d+(?:\.\d+)?)(s/it|it/s)", self.log)
        if tqdm:
            value, unit = tqdm[-1]
            r["tqdm_s_per_step"] = float(value) if unit == "s/it" else 1 / float(value)
        if self.code != 0:
            errors = [line for line in self.log.splitlines() if re.match(r"[\w.]*(Error|Exception)\b", line)]
            r["error"] = f"exit {self.code}: {errors[-1][:300] if errors else self.log[-300:]}"
        return r


def run_peer(command, env, cwd, log_path, timeout_s, record_path):
    """The peer's process run to its end or for timeout_s at most, its output in log_path; what it left."""
    started = time.time()
    with open(log_path, "w") as log:
        try:
            code = subprocess.run(
                command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s
            ).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    record = {}
    if os.path.exists(record_path):
        with open(record_path) as f:
            record = json.load(f)
    with open(log_path, errors="replace") as f:
        text = f.read()
    return PeerRun(code, text, record, round(time.time() - started, 1))


def report(result, results, header, path):
    """One experiment's figures printed as a RESULT line and added to the JSON file of the results so far, rewritten
    after each experiment so that a later one's crash keeps the earlier ones."""
    results.append(result)
    print("RESULT", json.dumps(result), flush=True)
    with open(path, "w") as f:
        json.dump({**header, "results": results}, f, indent=1)
