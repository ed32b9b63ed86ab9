"""LyCORIS, which the adapters are built from, imported on a background thread while the nodes before
the trainer run: its first import (bitsandbytes, peft and what they pull in) took 1.9 s of an SDXL run's
start on an H200 and 20 s on a 2-core machine, on the way to the first step otherwise."""

import importlib
import logging
import sys
import threading

LIBRARY = "lycoris.modules.locon"

_lock = threading.Lock()
_threads: dict[str, threading.Thread] = {}


def preload_adapter_library(module: str = LIBRARY) -> threading.Thread | None:
    """Starts importing `module` on a daemon thread, once per process, and returns the thread (None when
    the module is loaded or loading already): the adapters' own imports then find it loaded, or wait on
    Python's import lock for the rest."""
    with _lock:
        if module in _threads or module in sys.modules:
            return None
        thread = threading.Thread(target=_import, args=(module,), name=f"eridiffusion-preload-{module}", daemon=True)
        _threads[module] = thread
        thread.start()
        return thread


def wait_for_preloads() -> None:
    """Return once every preload started has finished. Before the run imports what the preloaded library
    shares with others (peft, transformers): two threads importing two modules that import each other
    make Python raise a _DeadlockError in one of them (seen: the optimizer check's transformers import
    beside LyCORIS's peft, in a fresh venv whose modules compile as they import)."""
    with _lock:
        started = list(_threads.values())
    for thread in started:
        thread.join()


def _import(module: str) -> None:
    try:
        importlib.import_module(module)
    except Exception:  # the adapter that needs it imports it again and raises there, in the run
        logging.getLogger(__name__).debug("preloading %s failed", module, exc_info=True)
