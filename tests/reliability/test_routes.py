"""Issue 11, case 7: the stop and loss routes keep no memory for prompts that are not training,
answer 400 with a message to every malformed request, and never send NaN (invalid JSON)."""

import asyncio
import json
import os

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from eridiffusion.nodes import progress

TO_RUNNING = "send prompt_id and node_id of the running trainer"


def app():
    application = web.Application()
    routes = web.RouteTableDef()
    progress.register_routes(routes)
    application.add_routes(routes)
    return application


def ask(*requests):
    """[(status, JSON answer)] of (method, path, keyword arguments) requests, in order."""

    async def send():
        async with TestClient(TestServer(app())) as client:
            answers = []
            for method, path, options in requests:
                response = await client.request(method, path, **options)
                answers.append((response.status, json.loads(await response.text(), parse_constant=_no_constant)))
            return answers

    return asyncio.run(send())


def _no_constant(name):
    raise AssertionError(f"the answer holds {name}, which is not JSON")


def test_stop_requests_for_prompts_that_are_not_training_are_refused_and_not_kept():
    answers = ask(
        *[("POST", "/eridiffusion/stop", {"json": {"prompt_id": f"p{i}", "node_id": "12"}}) for i in range(2000)]
    )
    assert set(status for status, _ in answers) == {404}
    assert answers[0][1] == {"error": "no LoRATrainer (node 12 of prompt p0) is training now"}
    assert progress.pending_stop_requests() == 0


def test_a_stop_request_is_kept_only_while_its_trainer_trains():
    progress.begin_run("running", "7")
    try:
        assert ask(("POST", "/eridiffusion/stop", {"json": {"prompt_id": "running", "node_id": 7}})) == [
            (200, {"stopping": True})
        ]
        assert progress.stop_requested("running", "7") and progress.pending_stop_requests() == 1
    finally:
        progress.end_run("running", "7")
    assert progress.pending_stop_requests() == 0


@pytest.mark.parametrize(
    "body, error",
    [
        ({"data": b"not json"}, 'send a JSON body: {"prompt_id": "...", "node_id": "..."}'),
        ({"data": b"\xff\xfe{}"}, 'send a JSON body: {"prompt_id": "...", "node_id": "..."}'),
        ({"json": [1, 2]}, 'send a JSON object: {"prompt_id": "...", "node_id": "..."}'),
        ({"json": {"node_id": "12"}}, f"prompt_id must be a non-empty string: {TO_RUNNING}"),
        ({"json": {"prompt_id": True, "node_id": "12"}}, f"prompt_id must be a non-empty string: {TO_RUNNING}"),
        ({"json": {"prompt_id": "p", "node_id": None}}, f"node_id must be a non-empty string: {TO_RUNNING}"),
        (
            {"json": {"prompt_id": "p" * 201, "node_id": "12"}},
            f"prompt_id must be at most 200 printable characters: {TO_RUNNING}",
        ),
        (
            {"json": {"prompt_id": "p\x00", "node_id": "12"}},
            f"prompt_id must be at most 200 printable characters: {TO_RUNNING}",
        ),
    ],
    ids=["not json", "not utf-8", "array", "no prompt_id", "bool id", "null node_id", "long id", "NUL in id"],
)
def test_a_malformed_stop_request_gets_400_with_the_reason(body, error):
    assert ask(("POST", "/eridiffusion/stop", body)) == [(400, {"error": error})]
    assert progress.pending_stop_requests() == 0


NOT_A_RUN = "run must be a folder name inside ComfyUI's output folder (no slashes or control characters)"


@pytest.mark.parametrize(
    "run, error",
    [
        ("", "give the run's folder name: /eridiffusion/loss?run=<run_name>"),
        ("a\x00b", NOT_A_RUN),
        ("../../etc", NOT_A_RUN),
        ("..", NOT_A_RUN),
        ("x" * 256, NOT_A_RUN),
    ],
    ids=["empty", "NUL", "traversal", "dot-dot", "too long"],
)
def test_a_malformed_run_name_gets_400_with_the_reason(run, error):
    assert ask(("GET", "/eridiffusion/loss", {"params": {"run": run}})) == [(400, {"error": error})]


def write_loss_file(comfy_dirs, run, text):
    folder = os.path.join(comfy_dirs["output"], run)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "loss.json"), "w") as f:
        f.write(text)


@pytest.mark.parametrize(
    "text, error",
    [
        (
            "{not json",
            "cannot be read as a loss history (Expecting property name enclosed in double quotes: line 1 "
            "column 2 (char 1)).",
        ),
        ("[1, 2]", "is not a loss history (an object with a list of numbers under 'loss')."),
        ('{"loss": ["a"]}', "is not a loss history (an object with a list of numbers under 'loss')."),
    ],
    ids=["not json", "array", "strings"],
)
def test_a_malformed_loss_file_gets_400_naming_it(text, error, comfy_dirs):
    write_loss_file(comfy_dirs, "malformed_loss", text)
    assert ask(("GET", "/eridiffusion/loss", {"params": {"run": "malformed_loss"}})) == [
        (400, {"error": f"output/malformed_loss/loss.json {error}"})
    ]


def test_non_finite_losses_are_sent_as_null(comfy_dirs):
    write_loss_file(comfy_dirs, "nan_loss", '{"loss": [0.5, NaN, Infinity, 0.25]}')  # as earlier versions wrote it
    assert ask(("GET", "/eridiffusion/loss", {"params": {"run": "nan_loss"}})) == [
        (200, {"loss": [0.5, None, None, 0.25], "samples": []})
    ]


def test_progress_events_send_non_finite_losses_as_null():
    sent = []
    reporter = progress.ProgressReporter(lambda event, payload: sent.append(payload), "1", "p", "/tmp/run")
    reporter.on_progress(1, 10, [float("nan"), 0.5], {"lr": 1e-3})
    assert sent[0]["losses"] == [None, 0.5]
    json.dumps(sent[0], allow_nan=False)  # raises on NaN


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    "body, error",
    [
        ({"data": DEEP}, "the body is 200000 bytes; a stop request is under 4096"),
        (
            {"data": b'{"prompt_id": ' + b"[" * 2000 + b"]" * 2000 + b"}"},
            'send a JSON body: {"prompt_id": "...", "node_id": "..."}',
        ),
        ({"data": b"[" * 3000 + b"]" * 3000, "chunked": True}, "the body is longer than a stop request (4096 bytes)"),
    ],
    ids=["100k deep", "deeper than the parser", "chunked, no length"],
)
def test_a_stop_request_too_large_or_too_deep_gets_400_with_the_reason(body, error):
    assert ask(("POST", "/eridiffusion/stop", body)) == [(400, {"error": error})]


def test_a_loss_file_nested_deeper_than_a_history_gets_400_naming_it(comfy_dirs):
    write_loss_file(comfy_dirs, "deep_loss", "[" * 100_000 + "]" * 100_000)
    assert ask(("GET", "/eridiffusion/loss", {"params": {"run": "deep_loss"}})) == [
        (400, {"error": "output/deep_loss/loss.json nests deeper than a loss history does."})
    ]
