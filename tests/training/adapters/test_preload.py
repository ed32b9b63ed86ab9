import sys

from eridiffusion.training.adapters.preload import preload_adapter_library, wait_for_preloads


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


def test_waiting_for_the_preloads_returns_once_their_imports_are_done(tmp_path, monkeypatch):
    (tmp_path / "eridiffusion_slow_import.py").write_text("import time\ntime.sleep(0.5)\nDONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    thread = preload_adapter_library("eridiffusion_slow_import")
    assert thread is not None and thread.is_alive()
    wait_for_preloads()
    assert not thread.is_alive() and sys.modules["eridiffusion_slow_import"].DONE
