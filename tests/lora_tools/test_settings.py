"""The toolbox nodes' `name: weight` lines: weights read, paths with a drive colon kept whole, a bad
weight named."""

import pytest

from eridiffusion.errors import EriDiffusionError
from eridiffusion.lora_tools.settings import weighted_lines


def test_name_weight_lines_give_each_file_its_weight_and_1_by_default():
    text = "a.safetensors: 0.8\n\nsub/b.safetensors:-0.5\nC:\\loras\\c.safetensors\nD:\\d.safetensors: 2"
    assert weighted_lines(text, "Merge LoRAs") == [
        ("a.safetensors", 0.8),
        ("sub/b.safetensors", -0.5),
        ("C:\\loras\\c.safetensors", 1.0),
        ("D:\\d.safetensors", 2.0),
    ]


def test_a_weight_that_is_no_number_and_an_empty_list_are_named():
    with pytest.raises(EriDiffusionError, match=r"Merge LoRAs: line 2 \('b.safetensors: half'\) has weight 'half'"):
        weighted_lines("a.safetensors\nb.safetensors: half", "Merge LoRAs")
    with pytest.raises(EriDiffusionError, match=r"Merge LoRAs: no LoRA given"):
        weighted_lines("\n  \n", "Merge LoRAs")
