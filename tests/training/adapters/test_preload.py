import sys

from eridiffusion.training.adapters.preload import preload_adapter_library


def test_a_preloaded_module_is_imported_on_a_thread_once():
    module = "xml.dom.pulldom"  # a light module this process has no use for
    sys.modules.pop(module, None)
    thread = preload_adapter_library(module)
    assert thread is not None and thread.daemon
    thread.join(timeout=30)
    assert module in sys.modules
    assert preload_adapter_library(module) is None  # started once


def test_a_module_already_loaded_starts_no_thread():
    assert preload_adapter_library("json") is None
