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


def _import(module: str) -> None:
    try:
        importlib.import_module(module)
    except Exception:  # the adapter that needs it imports it again and raises there, in the run
        logging.getLogger(__name__).debug("preloading %s failed", module, exc_info=True)
