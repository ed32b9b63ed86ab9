"""The family table: which ComfyUI model classes train, with which defaults, and the README's copy of it."""

import os
import re

import comfy.supported_models
import pytest

from devkit.support_table import support_table
from devkit.tiny_models import TINY_FAMILIES, build_tiny, hosts_running
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


def test_an_unknown_model_class_is_refused_by_name():
    class Unknown:
        model_config = comfy.supported_models.SD_X4Upscaler({})

    with pytest.raises(EriDiffusionError, match="SD_X4Upscaler"):
        family_of(Unknown())


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
