"""How far apart two runs of the same steps end, for tests that compare runs on a GPU: its backward kernels
(atomic adds in convolutions', upsampling's and attention's gradients) sum in no fixed order, so the same run
twice ends a little apart there, and the gap grows with the steps. A test asks that what it compares (a resumed
run against the run straight) is no further apart than a repeat of the straight run is from it, times a margin:
a resume that lost the optimizer's state or skipped a step lands orders of magnitude further. On the CPU the
runs repeat bit for bit, and the tests ask for that."""

MARGIN = 10.0  # (two independent GPU runs' gaps vary by a few times from run to run)


def largest_gap(a, b):
    """The largest absolute difference between `a` and `b`: lists of numbers, or {name: tensor} with the same
    names."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
        return max((float((a[k].double() - b[k].double()).abs().max()) for k in a), default=0.0)
    assert len(a) == len(b), (len(a), len(b))
    return max((abs(float(x) - float(y)) for x, y in zip(a, b, strict=True)), default=0.0)


def no_further_than_a_repeat(got, expected, repeat, margin=MARGIN):
    """Asserts `got` (lists of losses or {name: tensor}) ends no further from `expected` than `margin` times a
    repeat of `expected`'s run (`repeat`) does; exact where the repeat is."""
    noise = largest_gap(repeat, expected)
    gap = largest_gap(got, expected)
    assert gap <= margin * noise, f"{gap:.3g} apart, where a repeat of the same run ends {noise:.3g} apart"
    return gap, noise
