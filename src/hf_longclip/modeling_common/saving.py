"""`save_pretrained` for the classes registered for an Auto class. This module is part of every remote-code bundle,
so it imports only the standard library: the generator (`hf_longclip.export`) is imported at save time, and only
when this module is the library's own."""

import copy
import importlib
import inspect
import sys

_LIBRARY = "hf_longclip"


def _auto_map_entry(cls: type) -> str:
    """How a saved config's `auto_map` names `cls`: its module's file (flat in the bundle) and its name."""
    return f"{cls.__module__.split('.')[-1]}.{cls.__name__}"


class CodeBundleMixin:
    """For configurations, models and processors registered for an Auto class: `save_pretrained` from the library
    writes the generated bundle of the class's module (instead of transformers' verbatim copy, which would still
    import the library) next to what it saves. From remote code, transformers' copy of the module and its relative
    imports is already the bundle, so nothing is added.

    A model saves from a copy of its configuration, so saving leaves `model.config` as it was (transformers' own
    `save_pretrained` writes `dtype`, `architectures` and `auto_map` into the configuration it saves); the saved
    `config.json` gets `saved_auto_map()`. This is the library's only `save_pretrained`."""

    #: the Auto class this class is registered for (`register_for_auto_class`), None if it is not
    registered_auto_class = None

    @classmethod
    def register_for_auto_class(cls, *args, **kwargs):
        """transformers' `register_for_auto_class` (the library calls it at import, transformers when it loads remote
        code), remembering the Auto class in `registered_auto_class`."""
        super().register_for_auto_class(*args, **kwargs)
        auto_class = args[0] if args else kwargs.get(
            "auto_class", inspect.signature(super().register_for_auto_class).parameters["auto_class"].default)
        cls.registered_auto_class = auto_class if isinstance(auto_class, str) else auto_class.__name__

    def _auto_classes_also_loading(self) -> dict[str, type]:
        """Auto classes, besides the one this class is registered for, that load what this model saves, and the class
        each gives. A model with a base model (under `base_model_prefix`, e.g. a classifier's backbone) whose class is
        registered for `AutoModel` also loads with `AutoModel`, as transformers' own checkpoints do, and with every
        Auto class the base model's own checkpoints load with."""
        base = getattr(self, getattr(self, "base_model_prefix", "") or "", None)
        if base is None or base is self or getattr(type(base), "registered_auto_class", None) != "AutoModel":
            return {}
        also = base._auto_classes_also_loading() if isinstance(base, CodeBundleMixin) else {}
        return {**also, "AutoModel": type(base)}

    def saved_auto_map(self) -> dict[str, str]:
        """The `auto_map` that `save_pretrained` writes into a model's `config.json` (the configuration in memory
        keeps its own): the configuration's entries, the Auto classes of `_auto_classes_also_loading` and the one
        this class is registered for. Without a registered Auto class no code is saved, so no entry is added."""
        auto_map = dict(getattr(self.config, "auto_map", None) or {})
        if self.registered_auto_class is not None:
            auto_map.update({auto: _auto_map_entry(cls) for auto, cls in self._auto_classes_also_loading().items()})
            auto_map[self.registered_auto_class] = _auto_map_entry(type(self))
        return auto_map

    def save_pretrained(self, save_directory, *args, **kwargs):
        if kwargs.get("push_to_hub"):
            raise ValueError(
                "save_pretrained(push_to_hub=True) would upload the code before its bundle is written: "
                "call push_to_hub(repo_id), which saves through this method first"
            )
        config = getattr(self, "config", None)
        if config is None:  # a configuration or a processor saves itself
            result = super().save_pretrained(save_directory, *args, **kwargs)
        else:
            saved, auto_map = copy.deepcopy(config), self.saved_auto_map()
            if auto_map:
                saved.auto_map = auto_map
            self.config = saved
            try:
                result = super().save_pretrained(save_directory, *args, **kwargs)
            finally:
                self.config = config
        in_library = __name__.startswith(f"{_LIBRARY}.")
        if in_library and self.registered_auto_class is not None and kwargs.get("is_main_process", True):
            export = importlib.import_module(f"{_LIBRARY}.export")
            export.write_bundle(save_directory, sys.modules[type(self).__module__].__file__)
        return result
