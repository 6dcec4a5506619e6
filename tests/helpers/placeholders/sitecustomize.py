"""Placeholders for `torchvision`, in a process started with this folder on PYTHONPATH (Python imports
`sitecustomize` at startup). PyPI's torchvision links torch's CUDA libraries (0.28.0, the release of torch 2.13:
`libtorch_cuda.so`, `libc10_cuda.so`) and does not import beside the CPU build of torch 2.13, yet CLIP_benchmark's
command line imports it at module level: `clip_benchmark.datasets.builder` names torchvision's dataset classes, and
`import open_clip` (its model type) torchvision's transforms. Neither is used on the paths run here (a `wds/`
dataset, the `hf_longclip` model type). Every `torchvision.*` module and every name in it is a placeholder that
raises when called, so a path that did use torchvision fails loudly. No package metadata is added: transformers'
`is_torchvision_available()` stays False."""

import importlib.abc
import importlib.machinery
import sys
import types


class _Meta(type):
    def __getattr__(cls, name):  # InterpolationMode.BICUBIC and the like, read at class definition
        return cls

    def __call__(cls, *args, **kwargs):
        raise RuntimeError(f"{cls.__qualname__} is a placeholder: torchvision does not import beside this torch")


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Meta(f"{self.__name__}.{name}", (), {})


class _Placeholders(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers for `torchvision.*` only while a `clip_benchmark` module executes (its imports reach open_clip's), and
    takes them out of `sys.modules` when the outermost one is done."""

    depth = 0

    def find_spec(self, fullname, path=None, target=None):
        if self.depth and (fullname == "torchvision" or fullname.startswith("torchvision.")):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        if fullname == "clip_benchmark" or fullname.startswith("clip_benchmark."):
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is not None:
                spec.loader = _Wrapped(spec.loader, self)
            return spec
        return None

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


class _Wrapped(importlib.abc.Loader):
    def __init__(self, loader, placeholders):
        self.loader, self.placeholders = loader, placeholders

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.placeholders.depth += 1
        try:
            self.loader.exec_module(module)
        finally:
            self.placeholders.depth -= 1
            if not self.placeholders.depth:
                for name in [name for name in sys.modules if name.split(".")[0] == "torchvision"]:
                    del sys.modules[name]


sys.meta_path.insert(0, _Placeholders())
