"""Live training progress for the ComfyUI page: throttled events through ComfyUI's server, the
Stop & save request, and the loss history of a run. Without a browser (or a server) the events
are dropped before any work is done for them."""

import json
import os
import threading
import time

import folder_paths

from ..errors import EriDiffusionError
from ..formats.atomic_file import json_safe

EVENT = "eridiffusion.progress"
MIN_INTERVAL_S = 0.25  # at most four events a second, whatever the step rate
MAX_ID_CHARS = 200  # prompt ids are UUIDs and node ids short numbers; anything longer is not one
MAX_REQUEST_BYTES = 4096  # a stop request is two short ids
MAX_HISTORY_BYTES = 64 << 20  # loss.json: a million steps' losses take about 20 MB

# (prompt id, node id) of the trainers training now, and those of them asked to stop. A request
# for any other pair is refused, so neither set outgrows the trainers running at once.
_training: set[tuple[str, str]] = set()
_stop_requests: set[tuple[str, str]] = set()
_stop_lock = threading.Lock()


def begin_run(prompt_id, node_id):
    with _stop_lock:
        _training.add((str(prompt_id), str(node_id)))
        _stop_requests.discard((str(prompt_id), str(node_id)))


def end_run(prompt_id, node_id):
    with _stop_lock:
        _training.discard((str(prompt_id), str(node_id)))
        _stop_requests.discard((str(prompt_id), str(node_id)))


def request_stop(prompt_id, node_id):
    """Ask a training trainer to stop at its next step boundary; False when none of that id trains."""
    key = (str(prompt_id), str(node_id))
    with _stop_lock:
        if key not in _training:
            return False
        _stop_requests.add(key)
        return True


def stop_requested(prompt_id, node_id):
    with _stop_lock:
        return (str(prompt_id), str(node_id)) in _stop_requests


def pending_stop_requests():
    """How many stop requests are kept (the route's memory)."""
    with _stop_lock:
        return len(_stop_requests)


def server_sender():
    """send(event, data) through ComfyUI's running server, or None when there is none (headless)."""
    try:
        from server import PromptServer
    except ImportError:
        return None
    server = getattr(PromptServer, "instance", None)
    if server is None:
        return None
    return lambda event, data: server.send_sync(event, data, server.client_id)


class ProgressReporter:
    """Turns the trainer's per-step callbacks into a few small events a second: the losses since
    the last event, the validation points ([step, loss]) since the last event, step/total, seconds per
    step, ETA, learning rate, peak VRAM, new samples."""

    def __init__(self, send, node_id, prompt_id, run_dir, clock=time.monotonic):
        self.send, self.node_id, self.prompt_id = send, str(node_id), str(prompt_id)
        self.run = os.path.basename(run_dir)
        self.clock = clock
        self.pending_losses, self.pending_samples, self.pending_validation = [], [], []
        self.last_sent = None
        self.started, self.first_step = None, None
        self.events_sent = 0

    def on_progress(self, step, total, new_losses, stats):
        if self.send is None:
            return
        now = self.clock()
        if self.started is None:
            self.started, self.first_step = now, step
        if new_losses:
            self.pending_losses += new_losses
        self.pending_validation += stats.get("validation", [])
        due = self.last_sent is None or now - self.last_sent >= MIN_INTERVAL_S
        if due or step == total or self.pending_samples or self.pending_validation:
            self._send(step, total, stats, now)

    def on_samples(self, step, paths):
        output = folder_paths.get_output_directory()
        for path in paths:
            relative = os.path.relpath(path, output)
            self.pending_samples.append(
                {"filename": os.path.basename(relative), "subfolder": os.path.dirname(relative), "type": "output"}
            )

    def _send(self, step, total, stats, now):
        steps_timed = step - self.first_step
        seconds_per_step = (now - self.started) / steps_timed if steps_timed > 0 else None
        payload = {
            "node": self.node_id,
            "prompt_id": self.prompt_id,
            "run": self.run,
            "step": step,
            "total": total,
            "losses": self.pending_losses,
            "validation": self.pending_validation,
            "seconds_per_step": seconds_per_step,
            "eta_seconds": seconds_per_step * (total - step) if seconds_per_step is not None else None,
            "lr": stats.get("lr"),
            "peak_vram_gib": stats.get("peak_vram_gib"),
            "samples": self.pending_samples,
        }
        self.send(EVENT, json_safe(payload))
        self.pending_losses, self.pending_samples, self.pending_validation = [], [], []
        self.last_sent = now
        self.events_sent += 1


def loss_history(run):
    """The loss.json of output/<run> and its sample images, for a reopened page to redraw its panel;
    None when there is no such run. A loss.json that is not a loss history raises EriDiffusionError."""
    output = os.path.realpath(folder_paths.get_output_directory())
    path = os.path.realpath(os.path.join(output, run, "loss.json"))
    if os.path.commonpath([output, path]) != output or not os.path.isfile(path):
        return None
    if os.path.getsize(path) > MAX_HISTORY_BYTES:
        raise EriDiffusionError(
            f"output/{run}/loss.json is {os.path.getsize(path)} bytes, more than a run's loss history "
            f"({MAX_HISTORY_BYTES}); it is not one EriDiffusion wrote."
        )
    try:
        with open(path, encoding="utf-8") as f:
            history = json.load(f)
    except (ValueError, OSError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise EriDiffusionError(f"output/{run}/loss.json cannot be read as a loss history ({error}).") from None
    except RecursionError:
        raise EriDiffusionError(f"output/{run}/loss.json nests deeper than a loss history does.") from None
    if (
        not isinstance(history, dict)
        or not isinstance(history.get("loss"), list)
        or not all(v is None or isinstance(v, (int, float)) for v in history["loss"])
    ):
        raise EriDiffusionError(
            f"output/{run}/loss.json is not a loss history (an object with a list of numbers under 'loss')."
        )
    if not _is_validation_history(history.get("validation", [])):
        raise EriDiffusionError(
            f"output/{run}/loss.json has a malformed validation history (a list of [step, loss] pairs)."
        )
    samples = os.path.join(os.path.dirname(path), "samples")
    names = (
        sorted(os.listdir(samples), key=lambda n: os.path.getmtime(os.path.join(samples, n)))
        if os.path.isdir(samples)
        else []
    )
    history["samples"] = [
        {"filename": n, "subfolder": os.path.relpath(samples, output), "type": "output"}
        for n in names
        if n.endswith(".png")
    ]
    return json_safe(history)


def _is_validation_history(points):
    return isinstance(points, list) and all(
        isinstance(p, list) and len(p) == 2 and all(v is None or isinstance(v, (int, float)) for v in p) for p in points
    )


def id_problem(name, value):
    """What is wrong with a prompt or node id from a request, or None."""
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        return f"{name} must be a non-empty string"
    if len(str(value)) > MAX_ID_CHARS or any(ord(c) < 32 for c in str(value)):
        return f"{name} must be at most {MAX_ID_CHARS} printable characters"
    return None


def run_problem(run):
    """What is wrong with a run name from a request, or None: a plain folder name of output/."""
    if not run:
        return "give the run's folder name: /eridiffusion/loss?run=<run_name>"
    if len(run) > 255 or any(ord(c) < 32 for c in run) or any(c in run for c in "/\\") or run in (".", ".."):
        return "run must be a folder name inside ComfyUI's output folder (no slashes or control characters)"
    return None


_registered: list[bool] = []


def register_routes_once():
    """Add the routes to ComfyUI's running server, if there is one (not when headless)."""
    try:
        from server import PromptServer
    except ImportError:
        return
    if getattr(PromptServer, "instance", None) is not None and not _registered:
        register_routes(PromptServer.instance.routes)
        _registered.append(True)


def register_routes(routes):
    """POST /eridiffusion/stop {prompt_id, node_id}; GET /eridiffusion/loss?run=<name>. Malformed
    requests get 400 with a message; losses that are not finite come as null."""
    from aiohttp import web

    def refused(message, status=400):
        return web.json_response({"error": message}, status=status)

    @routes.post("/eridiffusion/stop")
    async def stop(request):
        if request.content_length is not None and request.content_length > MAX_REQUEST_BYTES:
            return refused(f"the body is {request.content_length} bytes; a stop request is under {MAX_REQUEST_BYTES}")
        try:
            text = await request.content.read(MAX_REQUEST_BYTES + 1)
            if len(text) > MAX_REQUEST_BYTES:
                return refused(f"the body is longer than a stop request ({MAX_REQUEST_BYTES} bytes)")
            body = json.loads(text)
        except (ValueError, RecursionError):  # (not JSON, not UTF-8, nested beyond the parser)
            return refused('send a JSON body: {"prompt_id": "...", "node_id": "..."}')
        if not isinstance(body, dict):
            return refused('send a JSON object: {"prompt_id": "...", "node_id": "..."}')
        for name in ("prompt_id", "node_id"):
            problem = id_problem(name, body.get(name))
            if problem:
                return refused(f"{problem}: send prompt_id and node_id of the running trainer")
        if not request_stop(body["prompt_id"], body["node_id"]):
            return refused(
                f"no LoRATrainer (node {body['node_id']} of prompt {body['prompt_id']}) is training now", status=404
            )
        return web.json_response({"stopping": True})

    @routes.get("/eridiffusion/loss")
    async def loss(request):
        run = request.query.get("run", "")
        problem = run_problem(run)
        if problem:
            return refused(problem)
        try:
            history = loss_history(run)
        except EriDiffusionError as error:
            return refused(str(error))
        if history is None:
            return refused("no such run", status=404)
        return web.json_response(history)
