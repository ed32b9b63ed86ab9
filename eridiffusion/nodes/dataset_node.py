"""LoadDataset: a folder of captioned images, video clips or edit pairs → DATASET."""

import os

import folder_paths
from comfy_api.latest import io

from ..training.data.dataset import MAX_VALIDATION_FRACTION, load_dataset
from .types import CATEGORY, Dataset

MISSING_CAPTION = {"error": "error", "use trigger word": "trigger_word"}
MISSING_MASK = {"error": "error", "weight 1": "weight_1"}


def resolve_dataset_folder(folder):
    """An absolute path as given; a relative one under ComfyUI's input folder."""
    folder = os.path.expanduser(folder.strip())
    return folder if os.path.isabs(folder) else os.path.join(folder_paths.get_input_directory(), folder)


class LoadDataset(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_LoadDataset",
            display_name="LoadDataset",
            category=CATEGORY,
            description="Reads a folder of images, video clips or frame folders with same-name caption files "
            "(or a metadata.jsonl); a control/ subfolder makes it an edit-pair dataset, a masks/ subfolder "
            "gives each image a loss mask.",
            inputs=[
                io.String.Input(
                    "folder",
                    default="my_dataset",
                    tooltip="Folder of jpg/jpeg/png/webp images, mp4/webm/mov/gif clips and frame folders "
                    "(a subfolder of numbered images = one clip), each with a caption file beside "
                    "it (02.mp4 → 02.txt, frames folder 03/ → 03.txt). Edit pairs (Flux Kontext, "
                    "Qwen-Image Edit): put each target's reference image, same stem, in a "
                    "control/ (or reference/) subfolder: 00.jpg ↔ control/00.png. Relative paths "
                    "are inside ComfyUI's input folder.",
                ),
                io.String.Input(
                    "caption_ext", default=".txt", tooltip="Extension of the caption file beside each image."
                ),
                io.String.Input(
                    "trigger_word", default="", tooltip="Prepended to every caption that lacks it (empty: none)."
                ),
                io.Combo.Input(
                    "missing_caption",
                    options=list(MISSING_CAPTION),
                    default="error",
                    tooltip="An image whose caption is missing or empty: stop with an error naming "
                    "it, or use the trigger word as its caption.",
                ),
                io.Float.Input(
                    "caption_dropout",
                    default=0.0,
                    min=0.0,
                    max=1.0,
                    step=0.01,
                    tooltip="Fraction of steps that train on an empty caption (helps prompt-free use).",
                ),
                io.Boolean.Input(
                    "shuffle_tags", default=False, tooltip="Shuffle comma-separated tags of each caption."
                ),
                io.Int.Input(
                    "keep_tags", default=1, min=0, max=64, tooltip="Tags at the start that never move when shuffling."
                ),
                io.Int.Input("repeats", default=1, min=1, max=1000, tooltip="How often each image counts per epoch."),
                io.Int.Input(
                    "frames",
                    default=17,
                    min=1,
                    max=1025,
                    step=4,
                    tooltip="Clips only: frames per training clip. Video VAEs take 4k+1 frames (Wan, "
                    "HunyuanVideo: 5, 9, 17, 33, 81…) or 8k+1 (LTX-Video: 9, 17, 25…); a shorter "
                    "clip is an error.",
                ),
                io.Float.Input(
                    "fps",
                    default=16.0,
                    min=0.0,
                    max=240.0,
                    step=1.0,
                    tooltip="Clips only: the rate frames are taken at (Wan 16, HunyuanVideo and LTX-Video "
                    "24); 0 takes every stored frame. Frame folders are read frame by frame.",
                ),
                io.Float.Input(  # optional: workflows saved before it existed still run
                    "validation",
                    optional=True,
                    default=0.0,
                    min=0.0,
                    max=MAX_VALIDATION_FRACTION,
                    step=0.05,
                    tooltip="Fraction of the images held out of training (evenly spread over the names) to "
                    "measure a validation loss on: LoRATrainer tracks it, keeps the best checkpoint and can "
                    "stop early (ValidationOptions). 0: off.",
                ),
                io.Combo.Input(
                    "missing_mask",
                    optional=True,
                    options=list(MISSING_MASK),
                    default="error",
                    tooltip="With a masks/ subfolder (a greyscale mask per image, same stem: white = learn, "
                    "black = ignore, grey = in between; TrainingExtras' mask_min sets the floor): an image "
                    "without a mask stops with an error naming it, or trains with weight 1 everywhere.",
                ),
                io.Boolean.Input(
                    "flip",
                    optional=True,
                    default=False,
                    tooltip="Also train on every image mirrored left to right (twice the images; masks and "
                    "reference images are mirrored with them). Leave off for asymmetric subjects (text, logos).",
                ),
            ],
            outputs=[Dataset.Output(display_name="dataset", tooltip="The images and their captions.")],
        )

    @classmethod
    def execute(
        cls,
        folder,
        caption_ext,
        trigger_word,
        missing_caption,
        caption_dropout,
        shuffle_tags,
        keep_tags,
        repeats,
        frames,
        fps,
        validation=0.0,
        missing_mask="error",
        flip=False,
    ):
        dataset = load_dataset(
            resolve_dataset_folder(folder),
            caption_ext=caption_ext,
            trigger_word=trigger_word.strip(),
            missing_caption=MISSING_CAPTION[missing_caption],
            caption_dropout=caption_dropout,
            shuffle_tags=shuffle_tags,
            keep_tags=keep_tags,
            repeats=repeats,
            frames=frames,
            fps=fps,
            validation=validation,
            missing_mask=MISSING_MASK[missing_mask],
            flip=flip,
        )
        return io.NodeOutput(dataset)
