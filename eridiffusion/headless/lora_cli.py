"""`eridiffusion lora inspect|convert|resize|merge|extract`: the LoRA toolbox (eridiffusion/lora_tools) on the
command line. Every verb that writes refuses an existing output unless --force, and prints what it did."""

import argparse

from ..errors import EriDiffusionError

DTYPES = ("fp16", "bf16", "fp32")


def add_lora_parser(commands):
    lora = commands.add_parser(
        "lora",
        help="inspect, convert, resize, merge or extract LoRA files",
        description="The LoRA toolbox: LoRA files in ComfyUI's keys (lora_up/lora_down/alpha, LoCon convs).",
    )
    verbs = lora.add_subparsers(dest="verb", required=True)
    inspect = verbs.add_parser("inspect", help="keys, family, algorithm, rank/alpha per block, metadata")
    inspect.add_argument("lora", help="the LoRA .safetensors file")
    inspect.add_argument(
        "--model",
        metavar="WEIGHTS",
        help="a diffusion model's .safetensors (or a checkpoint, or tiny-sdxl / tiny-sd15): list the LoRA keys "
        "ComfyUI would not load into it, and how many of them `lora convert` places (only its header is read)",
    )
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")

    _add_convert(verbs)

    resize = verbs.add_parser("resize", help="cut each layer by SVD to a rank or an energy share")
    resize.add_argument("lora", help="the LoRA/LoCon .safetensors file")
    _converting_model(resize)
    _output_options(resize, dtype_default=None)
    _rank_or_energy(resize)

    merge = verbs.add_parser("merge", help="several LoRAs with weights into one")
    merge.add_argument("loras", nargs="+", help="the LoRA/LoCon .safetensors files")
    merge.add_argument("--weights", type=float, nargs="+", metavar="W", help="one weight per file (default 1 each)")
    merge.add_argument(
        "--rank", type=int, help="compress each layer's sum to this rank by SVD (default: exact, ranks concatenated)"
    )
    merge.add_argument(
        "--into",
        metavar="CHECKPOINT",
        help="apply the LoRAs (at --weights, on the model and its text encoder) to this checkpoint and write a "
        "checkpoint (ComfyUI's own save, as CheckpointSave writes), instead of one LoRA",
    )
    _converting_model(merge)
    _output_options(merge, dtype_default=None)

    extract = verbs.add_parser("extract", help="a fine-tuned model's difference to its base as a LoRA")
    extract.add_argument("base", help="the base model's diffusion-model weights (.safetensors, ComfyUI's names)")
    extract.add_argument("tuned", help="the fine-tuned model's, same names")
    _output_options(extract, dtype_default="fp16")
    _rank_or_energy(extract)
    extract.add_argument("--device", default="cpu", help="where the SVDs run (cpu, cuda)")
    return lora


def _add_convert(verbs):
    convert = verbs.add_parser(
        "convert", help="another trainer's LoRA to ComfyUI's keys, or a LoRA to diffusers/PEFT's"
    )
    convert.add_argument(
        "lora", help="the LoRA .safetensors file (ai-toolkit, diffusers/PEFT, kohya, musubi-tuner, ...)"
    )
    convert.add_argument(
        "--model",
        required=True,
        metavar="WEIGHTS",
        help="the diffusion model or checkpoint (.safetensors) the LoRA is for (only its header is read), "
        "or tiny-sdxl / tiny-sd15",
    )
    convert.add_argument(
        "--to", choices=("comfyui", "peft"), default="comfyui", help="the keys to write (default: comfyui)"
    )
    _output_options(convert, dtype_default=None)


def _converting_model(verb):
    verb.add_argument(
        "--model",
        metavar="WEIGHTS",
        help="the diffusion model or checkpoint the LoRA is for (a .safetensors file or a diffusers folder; only "
        "its header is read), or tiny-sdxl / tiny-sd15: files in any trainer's format are converted to ComfyUI's "
        "keys for it on the way in, and the result is in ComfyUI's keys",
    )


def _model_of(path):
    """(ComfyUI model layout, weight reader) of --model `path`, or (None, None) without one."""
    if path is None:
        return None, None
    from ..lora_tools.model_layout import model_layout, weight_reader

    return model_layout(path), weight_reader(path)


def _output_options(verb, dtype_default):
    verb.add_argument("-o", "--output", required=True, help="the .safetensors file to write")
    verb.add_argument(
        "--dtype",
        choices=DTYPES,
        default=dtype_default,
        help=f"precision of the saved weights (default: {dtype_default or 'that of the input'})",
    )
    verb.add_argument("--force", action="store_true", help="overwrite the output if it exists")


def _rank_or_energy(verb):
    size = verb.add_mutually_exclusive_group(required=True)
    size.add_argument("--rank", type=int, help="every layer at this rank (at most)")
    size.add_argument(
        "--energy",
        type=float,
        help="each layer at the smallest rank keeping this share of its weight change, ‖ΔW_r‖/‖ΔW‖ (e.g. 0.9)",
    )


def run_lora(args: argparse.Namespace) -> list[str]:
    """Run one verb; the lines to print."""
    if args.verb == "inspect":
        from ..lora_tools.inspection import inspect_lora, report_json

        report = inspect_lora(args.lora, *_layouts(args.model)) if args.model else inspect_lora(args.lora)
        return [report_json(report)] if args.json else report.lines()
    from ..formats.lora_conventions import peft_weights_file
    from ..lora_tools.lora_layers import check_input, check_output, check_weights

    if args.verb == "convert":
        from ..lora_tools.convert import convert_lora

        check_input(peft_weights_file(args.lora))  # before the model's layout is built
        check_output(args.output, args.force)
        model, model_weights = _model_of(args.model)
        return convert_lora(args.lora, args.output, model, args.to, args.dtype, args.force, model_weights).lines()
    if args.verb == "resize":
        from ..lora_tools.resize import resize_lora

        check_input(peft_weights_file(args.lora))  # before the model's layout is built
        check_output(args.output, args.force)
        model, model_weights = _model_of(args.model)
        return resize_lora(
            args.lora, args.output, args.rank, args.energy, args.dtype, args.force, model, model_weights
        ).lines()
    if args.verb == "merge":
        from ..lora_tools.merge import merge_loras

        weights = args.weights or [1.0] * len(args.loras)
        if len(weights) != len(args.loras):
            raise EriDiffusionError(
                f"--weights has {len(weights)} value(s) for {len(args.loras)} files; give one weight per file."
            )
        if args.into:
            return _merge_into(args, weights)
        inputs = list(zip(args.loras, weights))
        check_weights(inputs, "merge")
        for path in args.loras:  # before the model's layout is built
            check_input(peft_weights_file(path))
        check_output(args.output, args.force)
        model, model_weights = _model_of(args.model)
        return merge_loras(inputs, args.output, args.rank, args.dtype, args.force, model, model_weights).lines()
    from ..lora_tools.extract import extract_from_files

    return extract_from_files(
        args.base, args.tuned, args.output, args.rank, args.energy, args.dtype, args.device, args.force
    ).lines()


def _merge_into(args, weights):
    from ..lora_tools.checkpoint import merge_into_checkpoint
    from ..lora_tools.lora_layers import check_output, check_weights, read_lora
    from .models import load_checkpoint

    if args.rank is not None or args.dtype is not None:
        raise EriDiffusionError(
            "--into writes a checkpoint at the checkpoint's own precision; leave out --rank and --dtype."
        )
    if args.model is not None:
        raise EriDiffusionError(
            "--into's checkpoint is the model the LoRAs are converted for on the way in; leave out --model."
        )
    check_weights(zip(args.loras, weights), "merge into a checkpoint")
    for path in args.loras:  # before the checkpoint is loaded: readable, a LoRA, finite
        read_lora(path, other_trainers=True)
    check_output(args.output, args.force)
    model, clip, vae = load_checkpoint(args.into, {}, required=False)
    loras = [(path, weight, weight) for path, weight in zip(args.loras, weights)]
    return merge_into_checkpoint(model, clip, vae, loras, args.output, args.force).lines()


def _layouts(model_path):
    """(ComfyUI's LoRA key map, convert's layer table) of the model in `model_path` (its header alone)."""
    import comfy.lora

    from ..formats.layer_names import layer_table
    from ..lora_tools.model_layout import model_layout

    model = model_layout(model_path)
    return comfy.lora.model_lora_keys_unet(model, {}), layer_table(model)
