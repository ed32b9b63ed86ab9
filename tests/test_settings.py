"""The setting declarations' checks (eridiffusion/settings.py): a host's choices asked only where needed."""

import pytest

from eridiffusion.errors import EriDiffusionError
from eridiffusion.headless.models import ModelSource
from eridiffusion.settings import Setting, SettingInfo, check_value, settings_of
from eridiffusion.training.samples.sampler_settings import SamplerSettings


def host_choice(asked):
    def choices():
        asked.append(True)
        return ("euler", "dpmpp_2m")

    return Setting("sampler_name", str, "euler", SettingInfo("A sampler.", choices=choices))


def test_a_host_choice_is_asked_for_a_value_other_than_the_default_only():
    asked = []
    assert check_value(host_choice(asked), "euler", "sample: sampler_name") == "euler"
    assert asked == []
    assert check_value(host_choice(asked), "dpmpp_2m", "sample: sampler_name") == "dpmpp_2m"
    with pytest.raises(
        EriDiffusionError, match="sample: sampler_name 'dpmpp_2' unknown; choose one of euler, dpmpp_2m"
    ):
        check_value(host_choice(asked), "dpmpp_2", "sample: sampler_name")
    assert asked == [True, True]


@pytest.mark.parametrize(
    "declaration, name",
    [
        (SamplerSettings, "sampler_name"),
        (SamplerSettings, "scheduler"),
        (ModelSource, "weight_dtype"),
        (ModelSource, "clip_type"),
    ],
)
def test_the_default_of_a_host_choice_is_one_of_the_hosts_choices(declaration, name):
    setting = settings_of(declaration)[name]
    assert callable(setting.info.choices)
    assert setting.default in setting.info.options()


def test_an_unknown_choice_ends_with_the_nearest_choice_asked_or_a_full_stop():
    from eridiffusion.training.run.precision import PrecisionSpec

    with pytest.raises(EriDiffusionError) as near:
        PrecisionSpec(fine_tune_dtype="fp16")
    assert str(near.value).endswith("choose one of fp32, bf16; did you mean bf16?")
    with pytest.raises(EriDiffusionError) as far:
        PrecisionSpec(fine_tune_dtype="int4")
    assert str(far.value).endswith("choose one of fp32, bf16.")
