"""Running the command line (`python -m eridiffusion train ...`) as a subprocess of the test, and
the node graph a config file describes, to run the same settings through ComfyUI's executor."""

import os
import subprocess
import sys

from devkit.paths import ROOT
from devkit.workflow import set_training_settings

CONFIGS = os.path.join(ROOT, "configs")


def cli_env():
    """The test's environment (its host: COMFYUI_PATH) with this checkout importable."""
    return {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


def run_cli(*args, cwd, timeout=600):
    """`python -m eridiffusion *args` in `cwd`, with this test's interpreter; the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", "eridiffusion", *map(str, args)],
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def refused_train(config, output, *args, cwd, process=None):
    """`train config --output output *args`, which must be refused: (its one error line without the
    `eridiffusion: error: ` prefix, the names it left in the output folder). Run by `process` (a
    command_process() of the test module) where given, else a process of its own."""
    run = run_cli if process is None else process.run
    done = run("train", config, *args, "--output", output, cwd=cwd)
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("eridiffusion: error: ")]
    assert len(errors) == 1, done.stderr
    return errors[0][len("eridiffusion: error: ") :], sorted(os.listdir(output)) if os.path.isdir(output) else []


def named_in(config, error):
    """`error` (a refusal of the command line) less the config file's name it must start with: a refusal of
    the config's values names the file."""
    assert error.startswith(f"{config}: "), error
    return error[len(f"{config}: ") :]


def command_process():
    """A devkit.command_process.CommandProcess with this test's environment (cli_env)."""
    from devkit.command_process import CommandProcess

    return CommandProcess(cli_env())


def start_cli(*args, cwd):
    """The same, started in the background, its output going to stdout.txt and stderr.txt in `cwd`;
    the Popen."""
    with open(os.path.join(cwd, "stdout.txt"), "w") as out, open(os.path.join(cwd, "stderr.txt"), "w") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "eridiffusion", *map(str, args)], cwd=cwd, env=cli_env(), stdout=out, stderr=err
        )


def write_yaml(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return str(path)


def graph_prompt(config):
    """The API prompt of the graph `config` (a RunConfig on a tiny model) describes: TinyDemoModel →
    LoadDataset → CacheLatents → LoRATrainer (with SampleDuringTraining and TrainingObjective when
    the config has them, and the CLIP, as the command line passes it) → SaveLoRA, LossGraph."""
    assert config.model.tiny, "the graph of a config is built for the tiny models only"
    prompt = {
        "1": {"class_type": "EriDiffusion_TinyDemoModel", "inputs": {"architecture": config.model.tiny, "seed": 0}},
        "2": {"class_type": "EriDiffusion_LoadDataset", "inputs": dict(config.dataset)},
        "3": {
            "class_type": "EriDiffusion_CacheLatents",
            "inputs": {**config.cache, "dataset": ["2", 0], "vae": ["1", 2], "clip": ["1", 1]},
        },
        "4": {
            "class_type": "EriDiffusion_LoRATrainer",
            "inputs": {"model": ["1", 0], "training_data": ["3", 0], "clip": ["1", 1]},
        },
        "5": {"class_type": "EriDiffusion_SaveLoRA", "inputs": {**config.save, "lora": ["4", 1]}},
        "6": {"class_type": "EriDiffusion_LossGraph", "inputs": {"loss": ["4", 2]}},
    }
    if config.sample is not None:
        prompt["7"] = {
            "class_type": "EriDiffusion_SampleDuringTraining",
            "inputs": {**config.sample, "clip": ["1", 1], "vae": ["1", 2]},
        }
        prompt["4"]["inputs"]["sample_config"] = ["7", 0]
    for node_id, section in (("8", "validation_dataset"), ("9", "regularization_dataset")):
        if getattr(config, section) is not None:  # a second LoadDataset into CacheLatents' input of that name
            prompt[node_id] = {"class_type": "EriDiffusion_LoadDataset", "inputs": dict(getattr(config, section))}
            prompt["3"]["inputs"][section] = [node_id, 0]
    # every options node linked, with the config's values: the graph a user would build for it
    set_training_settings(prompt, {**config.train, **(config.objective or {})})
    return prompt
