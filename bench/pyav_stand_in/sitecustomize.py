"""On the GPU machine, whose image lacks PyAV (bench/gpu_host.sh puts this folder on PYTHONPATH
there): empty `av` modules, so that ComfyUI's API, which imports PyAV for video I/O, and the tests
and benchmarks that touch no video or audio file import in every process, subprocesses too."""

import importlib.abc
import importlib.machinery
import sys
import types


class _PyAVStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == "av" or name.startswith("av."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []

        def stand_in(attribute):
            if attribute.startswith("__"):
                raise AttributeError(attribute)
            return type(attribute, (), {})

        module.__getattr__ = stand_in
        return module

    def exec_module(self, module):
        pass


sys.meta_path.append(_PyAVStandIn())  # after the real finders: a real PyAV wins
