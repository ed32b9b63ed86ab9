"""LoadDataset: a folder of captioned images → DATASET."""
import os

import folder_paths
from comfy_api.latest import io

from ..training.dataset import load_dataset
from .types import CATEGORY, Dataset

MISSING_CAPTION = {"error": "error", "use trigger word": "trigger_word"}


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
            description="Reads a folder of images with same-name caption files (or a metadata.jsonl).",
            inputs=[
                io.String.Input("folder", default="my_dataset",
                                tooltip="Folder of jpg/jpeg/png/webp images; relative paths are inside ComfyUI's input folder."),
                io.String.Input("caption_ext", default=".txt", tooltip="Extension of the caption file beside each image."),
                io.String.Input("trigger_word", default="", tooltip="Prepended to every caption that lacks it (empty: none)."),
                io.Combo.Input("missing_caption", options=list(MISSING_CAPTION), default="error",
                               tooltip="An image without caption: stop with an error, or use the trigger word as its caption."),
                io.Float.Input("caption_dropout", default=0.0, min=0.0, max=1.0, step=0.01,
                               tooltip="Fraction of steps that train on an empty caption (helps prompt-free use)."),
                io.Boolean.Input("shuffle_tags", default=False, tooltip="Shuffle comma-separated tags of each caption."),
                io.Int.Input("keep_tags", default=1, min=0, max=64, tooltip="Tags at the start that never move when shuffling."),
                io.Int.Input("repeats", default=1, min=1, max=1000, tooltip="How often each image counts per epoch."),
            ],
            outputs=[Dataset.Output(display_name="dataset", tooltip="The images and their captions.")],
        )

    @classmethod
    def execute(cls, folder, caption_ext, trigger_word, missing_caption, caption_dropout, shuffle_tags,
                keep_tags, repeats):
        dataset = load_dataset(resolve_dataset_folder(folder), caption_ext=caption_ext,
                               trigger_word=trigger_word.strip(), missing_caption=MISSING_CAPTION[missing_caption],
                               caption_dropout=caption_dropout, shuffle_tags=shuffle_tags, keep_tags=keep_tags,
                               repeats=repeats)
        return io.NodeOutput(dataset)
