"""The tiny Kandinsky 5 video stack reads an empty first frame and mask beside its latent, as
model_base.Kandinsky5.concat_cond gives a text-to-video run."""

import pytest

from devkit.tiny_models import family_params


@pytest.fixture(params=family_params(["kandinsky5"]))
def kandinsky5_stack(request, video_stack_of):
    return video_stack_of(request.param)


def test_kandinsky5_reads_an_empty_first_frame_and_mask_beside_the_latent(kandinsky5_stack, video_inputs):
    _, model, _, _, _, latent, cond = kandinsky5_stack
    _, inputs = video_inputs(model, latent, cond)
    extra = inputs["c_concat"]
    assert tuple(extra.shape) == (1, 17) + tuple(latent.shape[2:])  # 16 image channels + the mask
    assert float(extra.abs().max()) == 0.0  # text-to-video: no first frame, nothing masked
