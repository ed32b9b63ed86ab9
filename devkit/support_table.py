"""The README's support table: every row of eridiffusion.training.model.families.FAMILIES with its
training defaults, and the ComfyUI hosts on which a tiny stack of it trains in CI. The same on
every host, so one README holds for all of them."""

from devkit.tiny_models import TESTED_HOSTS, TINY_FAMILIES, hosts_running
from eridiffusion.training.model.families import FAMILIES

_TIMESTEPS = {
    "uniform": lambda s: "uniform",
    "logit_normal": lambda s: f"logit-normal({s.logit_mean:g}, {s.logit_std:g})",
    "sigmoid": lambda s: f"sigmoid(scale {s.sigmoid_scale:g})",
    "shift": lambda s: "shift, resolution-dependent" if s.shift == 0 else f"shift {s.shift:g}",
}


def hosts_of(family):
    """The tested hosts on which every tiny stack of `family` trains, oldest first."""
    stacks = [tiny for tiny in TINY_FAMILIES.values() if tiny.family == family.name]
    if not stacks:
        return []
    return [h for h in TESTED_HOSTS if all(h in hosts_running(tiny) for tiny in stacks)]


def support_table():
    rows = [
        "| family | ComfyUI class | adapter targets (default) | objective | timestep default | training guidance "
        "| tested on ComfyUI |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in FAMILIES:
        hosts = hosts_of(f)
        if not hosts:
            rows.append(
                f"| {f.name} | {', '.join(f.config_classes)} | — | — | — | — | no: not in ComfyUI "
                f"{' or '.join(TESTED_HOSTS)} |"
            )
            continue
        timestep = _TIMESTEPS[f.sampling.timestep_sampling](f.sampling)
        guidance = "model default" if f.guidance is None else f"{f.guidance:g}"
        rows.append(
            f"| {f.name} | {', '.join(f.config_classes)} | {f.targets} | {f.prediction} | {timestep} "
            f"— {f.reference} | {guidance} | {', '.join(hosts)} |"
        )
    return "\n".join(rows)


def class_line(name):
    """The models table's row of ComfyUI model class `name`: its status, and what it means."""
    from eridiffusion.training.model.families import class_status

    status, what = class_status(name)
    if status == "row":
        hosts = hosts_of(what)
        if hosts:
            return f"| {name} | tested | {what.name}: trains on ComfyUI {', '.join(hosts)} in CI |"
        return f"| {name} | row, not tested | {what.name}: no tiny stack of it trains in CI |"
    if status == "generic":
        return (
            f"| {name} | generic | no tested row: every linear layer adaptable, the model's own sampling, "
            "captions as its only conditioning |"
        )
    return f"| {name} | {status} | {what} |"


def models_table(classes):
    """Every ComfyUI model class of `classes` (comfy.supported_models.models' names) with its status."""
    rows = ["| ComfyUI class | status | what it means |", "|---|---|---|"]
    return "\n".join(rows + [class_line(name) for name in classes])
