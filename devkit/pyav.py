"""PyAV for the test media the devkit writes (clips, music, clips with sound)."""


def pyav():
    """PyAV, to write the test media; where it is bench/pyav_stand_in's empty module (the GPU machine's
    image lacks PyAV, and its wheel is too large to carry) the test skips, naming why."""
    import av

    if getattr(av, "__file__", None) is None:
        import pytest

        pytest.skip("PyAV is missing here (bench/pyav_stand_in's empty module stands in): no clip can be written")
    return av
