"""Empty `av` modules where PyAV is missing (the GPU machine's image): ComfyUI's API imports PyAV
for video I/O, which the benchmarks and GPU tests never touch. sitecustomize.py beside this file
installs it in every process that has this folder on PYTHONPATH (bench/gpu_host.sh);
bench/train_speed.py's stub_pyav installs it in its own."""

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


def install():
    """After the real finders: a real PyAV wins."""
    if not any(isinstance(finder, _PyAVStandIn) for finder in sys.meta_path):
        sys.meta_path.append(_PyAVStandIn())
