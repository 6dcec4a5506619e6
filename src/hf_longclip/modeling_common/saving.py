"""`save_pretrained` for the classes registered for an Auto class. This module is part of every remote-code bundle,
so it imports only the standard library: the generator (`hf_longclip.export`) is imported at save time, and only
when this module is the library's own."""

import importlib
import sys

_LIBRARY = "hf_longclip"


class CodeBundleMixin:
    """For configurations, models and processors registered for an Auto class: `save_pretrained` from the library
    writes the generated bundle of the class's module (instead of transformers' verbatim copy, which would still
    import the library) next to what it saves. From remote code, transformers' copy of the module and its relative
    imports is already the bundle, so nothing is added."""

    def save_pretrained(self, save_directory, *args, **kwargs):
        if kwargs.get("push_to_hub"):
            raise ValueError(
                "save_pretrained(push_to_hub=True) would upload the code before its bundle is written: "
                "call push_to_hub(repo_id), which saves through this method first"
            )
        result = super().save_pretrained(save_directory, *args, **kwargs)
        in_library = __name__.startswith(f"{_LIBRARY}.")
        if in_library and self._auto_class is not None and kwargs.get("is_main_process", True):
            export = importlib.import_module(f"{_LIBRARY}.export")
            export.write_bundle(save_directory, sys.modules[type(self).__module__].__file__)
        return result
