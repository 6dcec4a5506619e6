"""Optional dependencies, imported where a feature first needs them. A package that only one feature uses (CAST's
superpixels, faiss' nearest neighbours, streamed shards, plots, the demo) is an extra of hf-longclip
(`pip install "hf-longclip[cast]"`), not a requirement, so the library imports it inside that feature's function and
a missing one is one ImportError naming the extra and its pip packages.

Standard library only: this module travels in remote-code bundles (CAST's image processor uses it), where
hf_longclip is not installed; hence the message names the pip packages too. The import is `importlib.import_module`,
not an import statement, so transformers' remote-code loader (which refuses a file whose imports are missing) does
not demand the package before the feature is used.
"""

import importlib
from collections.abc import Sequence
from types import ModuleType


def require(module_name: str, extra: str, packages: str | Sequence[str], feature: str) -> ModuleType:
    """The module `module_name` (e.g. "skimage.segmentation"), imported; where it cannot be, ImportError saying that
    `feature` (e.g. "CAST's superpixels") needs the pip `packages` and how to install them: the extra
    `hf-longclip[<extra>]`, or the packages themselves where hf-longclip is not installed (a checkpoint's remote
    code)."""
    try:
        return importlib.import_module(module_name)
    except ImportError as error:
        packages = [packages] if isinstance(packages, str) else list(packages)
        listed = " and ".join(packages) if len(packages) <= 2 else f"{', '.join(packages[:-1])} and {packages[-1]}"
        raise ImportError(
            f"{listed} {'is' if len(packages) == 1 else 'are'} needed for {feature}, and {module_name} cannot be "
            f"imported ({error}): pip install \"hf-longclip[{extra}]\", or the packages themselves (where "
            f"hf-longclip is not installed, as for a checkpoint's remote code): pip install {' '.join(packages)}",
            name=module_name,
        ) from error


__all__ = ["require"]
