"""The family table: which ComfyUI model classes train, with which defaults, and the README's copy of it."""

import os
import re

import comfy.supported_models
import pytest

from devkit.support_table import support_table
from devkit.tiny_models import TESTED_HOSTS, TINY_FAMILIES, build_tiny, hosts_running
from eridiffusion.comfy_compat import host_version
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.model.families import FAMILIES, family_named, family_of, resolve_objective, resolve_targets
from eridiffusion.training.model.objective import ObjectiveSpec

README = os.path.join(os.path.dirname(__file__), "..", "..", "..", "README.md")


def test_readme_support_table_is_the_generated_one():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    found = re.search(r"<!-- support-table:start -->\n(.*?)\n<!-- support-table:end -->", text, re.S)
    assert found, "README lacks the support-table markers"
    assert found.group(1) == support_table(), "regenerate it: .venv/bin/python scripts/support_table.py"


def test_every_tiny_family_proves_a_row_of_the_table():
    names = {f.name for f in FAMILIES}
    assert {tiny.family for tiny in TINY_FAMILIES.values()} <= names
    for name in ("sd15", "sdxl"):
        model, _, _ = build_tiny(name)
        assert family_of(model.model).name == TINY_FAMILIES[name].family


def test_the_hosts_a_tiny_family_claims_are_the_hosts_that_have_its_classes():
    for name, tiny in TINY_FAMILIES.items():
        assert (host_version() in hosts_running(tiny)) == (not tiny.missing_on_host()), name


def test_host_classes_of_supported_families_exist_in_this_comfyui():
    for family in FAMILIES:
        if family.host_has():
            assert all(hasattr(comfy.supported_models, c) for c in family.config_classes), family.name


def test_a_family_this_comfyui_lacks_gets_a_clear_error():
    for name in ("Sana", "Kolors"):
        with pytest.raises(EriDiffusionError, match="not supported by this ComfyUI"):
            family_named(name)


def test_auto_takes_the_family_default_and_explicit_settings_stay():
    flux = family_named("Flux.1 dev (and Flex-style variants)")
    resolved = resolve_objective(ObjectiveSpec(noise_offset=0.1), flux)
    assert (resolved.timestep_sampling, resolved.shift, resolved.noise_offset) == ("shift", 0.0, 0.1)
    explicit = ObjectiveSpec(timestep_sampling="uniform")
    assert resolve_objective(explicit, flux) is explicit
    assert resolve_targets("auto", flux) == "blocks" and resolve_targets("attention", flux) == "attention"
    assert resolve_targets("auto", family_named("SDXL")) == "attention"


@pytest.mark.parametrize(
    "name, config, expected",
    [
        ("flux_dev", {}, {"guidance": 1.0}),  # the family's training default
        ("flux_dev", {"guidance": 2.5}, {"guidance": 2.5}),  # an explicit value wins
        ("flux_dev", {"bypass_guidance_embedding": True}, {"guidance": None}),  # skips the embedding
        ("chroma", {}, {}),  # the model's own ComfyUI default
    ],
)
def test_guidance_fed_to_the_model(name, config, expected):
    from eridiffusion.training.model.prepared_data import conditioning_options
    from eridiffusion.training.run.config import TrainConfig

    model, _, _ = build_tiny(name)
    assert conditioning_options(TrainConfig(**config), family_of(model.model)) == expected


def test_bypassing_the_guidance_embedding_removes_the_guidance_input():
    import torch

    from eridiffusion.training.model.inputs import model_inputs

    model, clip, _ = build_tiny("flux_dev")
    conditioning = clip.encode_from_tokens_scheduled(clip.tokenize("a dog"))
    latent = torch.zeros(16, 8, 8)
    fed = model_inputs(model.model, conditioning, latent, "cpu", defaults={"guidance": 1.0})
    bypassed = model_inputs(model.model, conditioning, latent, "cpu", defaults={"guidance": None})
    assert float(fed["guidance"].cond) == 1.0
    assert "guidance" not in bypassed


MODELS_DOC = os.path.join(os.path.dirname(README), "docs", "models.md")


def test_every_model_class_of_this_comfyui_is_in_the_models_table_with_its_status():
    """docs/models.md lists the newest tested host's classes (on that host: exactly the generated
    table); an older host's classes are each there, with the status this checkout gives them."""
    from devkit.support_table import class_line, models_table

    with open(MODELS_DOC, encoding="utf-8") as f:
        found = re.search(r"<!-- models-table:start -->\n(.*?)\n<!-- models-table:end -->", f.read(), re.S)
    assert found, "docs/models.md lacks the models-table markers"
    classes = [model.__name__ for model in comfy.supported_models.models]
    if host_version() == TESTED_HOSTS[-1]:
        assert found.group(1) == models_table(classes), "regenerate it: scripts/support_table.py on that host"
    lines = set(found.group(1).splitlines())
    assert [name for name in classes if class_line(name) not in lines] == []


@pytest.mark.parametrize(
    "name, status",
    [("SD_X4Upscaler", "an upscaler"), ("SAM3", "a segmentation model"), ("Hunyuan3Dv2", "a 3D shape model")],
)
def test_a_class_that_is_no_such_model_is_refused_saying_what_it_is(name, status):
    if not hasattr(comfy.supported_models, name):
        pytest.skip(f"ComfyUI {host_version()} has no {name}")

    class Loaded:
        model_config = getattr(comfy.supported_models, name)({})

    with pytest.raises(EriDiffusionError, match=f"'{name}', {status}"):
        family_of(Loaded())


def test_a_class_training_would_get_wrong_is_refused_with_the_reason(monkeypatch):
    from eridiffusion.training.model import families

    class NewModel:  # a model class no row names
        pass

    class Loaded:
        model_config = NewModel()

    monkeypatch.setitem(families.NOT_YET, "NewModel", "its forward reuses stale values")
    with pytest.raises(EriDiffusionError, match="cannot train ComfyUI's 'NewModel' yet: its forward reuses stale"):
        family_of(Loaded())


def test_a_class_no_row_names_gets_a_generic_family_from_its_own_sampling():
    import comfy.model_sampling

    from eridiffusion.training.model.families import generic_family

    class Flow(comfy.model_sampling.ModelSamplingDiscreteFlow, comfy.model_sampling.CONST):
        pass

    flow = Flow()
    flow.set_parameters(shift=5.0)
    family = generic_family("Krea2", flow)
    assert family.generic and family.targets == "all-linear"
    assert (family.sampling.timestep_sampling, family.sampling.shift) == ("shift", 5.0)
    eps = comfy.model_sampling.ModelSamplingDiscrete()
    assert generic_family("SD20", eps).sampling.timestep_sampling == "uniform"
