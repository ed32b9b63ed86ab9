"""devkit/repeats.py: the gap between runs, and the assertion that a compared run is no further apart than a
repeat of the run it is compared with."""

import pytest
import torch

from devkit.repeats import largest_gap, no_further_than_a_repeat


def test_the_gap_is_the_largest_difference_of_losses_or_tensors():
    assert largest_gap([1.0, 2.0], [1.0, 2.5]) == 0.5
    a = {"w": torch.zeros(3), "b": torch.tensor([1.0])}
    assert largest_gap(a, {"w": torch.tensor([0.0, -0.25, 0.0]), "b": torch.tensor([1.0])}) == 0.25
    with pytest.raises(AssertionError):
        largest_gap(a, {"w": torch.zeros(3)})


def test_a_run_further_apart_than_a_repeat_allows_fails_and_an_exact_repeat_asks_for_exact():
    straight, repeat = [1.0, 0.9, 0.8], [1.0, 0.9, 0.8001]
    assert no_further_than_a_repeat([1.0, 0.9, 0.8005], straight, repeat) == pytest.approx((5e-4, 1e-4))
    with pytest.raises(AssertionError, match="apart, where a repeat of the same run ends"):
        no_further_than_a_repeat([1.0, 0.95, 0.8], straight, repeat)
    with pytest.raises(AssertionError):
        no_further_than_a_repeat([1.0, 0.9, 0.80001], straight, list(straight))
