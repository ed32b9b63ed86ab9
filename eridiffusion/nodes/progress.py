"""Live training progress for the ComfyUI page: throttled events through ComfyUI's server, the
Stop & save request, and the loss history of a run. Without a browser (or a server) the events
are dropped before any work is done for them."""
import json
import os
import threading
import time

import folder_paths

EVENT = "eridiffusion.progress"
MIN_INTERVAL_S = 0.25  # at most four events a second, whatever the step rate

_stop_requests = set()
_stop_lock = threading.Lock()


def request_stop(prompt_id, node_id):
    with _stop_lock:
        _stop_requests.add((str(prompt_id), str(node_id)))


def stop_requested(prompt_id, node_id):
    with _stop_lock:
        return (str(prompt_id), str(node_id)) in _stop_requests


def clear_stop(prompt_id, node_id):
    with _stop_lock:
        _stop_requests.discard((str(prompt_id), str(node_id)))


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
    the last event, step/total, seconds per step, ETA, learning rate, peak VRAM, new samples."""

    def __init__(self, send, node_id, prompt_id, run_dir, clock=time.monotonic):
        self.send, self.node_id, self.prompt_id = send, str(node_id), str(prompt_id)
        self.run = os.path.basename(run_dir)
        self.clock = clock
        self.pending_losses, self.pending_samples = [], []
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
        due = self.last_sent is None or now - self.last_sent >= MIN_INTERVAL_S
        if due or step == total or self.pending_samples:
            self._send(step, total, stats, now)

    def on_samples(self, step, paths):
        output = folder_paths.get_output_directory()
        for path in paths:
            relative = os.path.relpath(path, output)
            self.pending_samples.append({"filename": os.path.basename(relative),
                                         "subfolder": os.path.dirname(relative), "type": "output"})

    def _send(self, step, total, stats, now):
        steps_timed = step - self.first_step
        seconds_per_step = (now - self.started) / steps_timed if steps_timed > 0 else None
        payload = {"node": self.node_id, "prompt_id": self.prompt_id, "run": self.run, "step": step,
                   "total": total, "losses": self.pending_losses, "seconds_per_step": seconds_per_step,
                   "eta_seconds": seconds_per_step * (total - step) if seconds_per_step is not None else None,
                   "lr": stats.get("lr"), "peak_vram_gib": stats.get("peak_vram_gib"),
                   "samples": self.pending_samples}
        self.send(EVENT, payload)
        self.pending_losses, self.pending_samples = [], []
        self.last_sent = now
        self.events_sent += 1


def loss_history(run):
    """The loss.json of output/<run> and its sample images, for a reopened page to redraw its panel."""
    output = os.path.realpath(folder_paths.get_output_directory())
    path = os.path.realpath(os.path.join(output, run, "loss.json"))
    if os.path.commonpath([output, path]) != output or not os.path.isfile(path):
        return None
    with open(path) as f:
        history = json.load(f)
    samples = os.path.join(os.path.dirname(path), "samples")
    names = sorted(os.listdir(samples), key=lambda n: os.path.getmtime(os.path.join(samples, n))) \
        if os.path.isdir(samples) else []
    history["samples"] = [{"filename": n, "subfolder": os.path.relpath(samples, output), "type": "output"}
                          for n in names if n.endswith(".png")]
    return history


_registered = []


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
    """POST /eridiffusion/stop {prompt_id, node_id}; GET /eridiffusion/loss?run=<name>."""
    from aiohttp import web

    @routes.post("/eridiffusion/stop")
    async def stop(request):
        body = await request.json()
        if not body.get("prompt_id") or not body.get("node_id"):
            return web.json_response({"error": "send prompt_id and node_id of the running trainer"}, status=400)
        request_stop(body["prompt_id"], body["node_id"])
        return web.json_response({"stopping": True})

    @routes.get("/eridiffusion/loss")
    async def loss(request):
        history = loss_history(request.query.get("run", ""))
        if history is None:
            return web.json_response({"error": "no such run"}, status=404)
        return web.json_response(history)
