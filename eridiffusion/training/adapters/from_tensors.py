"""Adapters rebuilt from a saved LoRA file's tensors (ours, or another trainer's plain LoRA/DoRA):
the layers the file addresses get adapters of the file's algorithm and rank, set to its values."""

from ...errors import EriDiffusionError
from ...formats.lora_file import tensor_groups
from .attach import AdapterSet


def adapters_from_tensors(root, tensors, spec, prefixes, path):
    """An AdapterSet for the layers of `root` that the file addresses, set to the file's values.
    Returns (adapter set, the file keys it used)."""
    by_prefix = {prefix: key[: -len(".weight")] for key, prefix in prefixes.items()}
    groups = {prefix: group for prefix, group in tensor_groups(tensors).items() if prefix in by_prefix}
    layer_groups = {by_prefix[prefix]: (prefix, group) for prefix, group in groups.items()}
    adapters = {}
    # model order, as a fresh AdapterSet has it: a resumed optimizer's state lines up by position
    ordered = [(name, module) for name, module in root.named_modules() if name in layer_groups]
    for index, (layer, module) in enumerate(ordered):
        prefix, group = layer_groups[layer]
        adapter = spec.build(module, seed=index)
        try:
            adapter.load_comfy_tensors(group)
        except (KeyError, RuntimeError) as error:
            raise EriDiffusionError(
                f"{path}: the weights for {prefix} do not fit a {spec.algorithm} of rank "
                f"{spec.rank} on this model ({error}). Was it trained on another model?"
            ) from None
        adapters[layer] = adapter
    used = {f"{p}.{n}" for p, g in groups.items() for n in g}
    return AdapterSet(spec, adapters), used
