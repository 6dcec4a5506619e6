"""The model `hf-longclip eval` evaluates: one of our checkpoints or a plain transformers `CLIPModel`, by path or
Hub id, failing fast with a one-line reason."""

from __future__ import annotations

from pathlib import Path

import torch

from ..fileio import naming_damaged_weights


def load_model(model_name_or_path: str, device: str | None = None, trust_remote_code: bool = False):
    """Any of our checkpoints or a plain transformers CLIPModel (through the Auto classes, which `import hf_longclip`
    registers ours with), with its processor, in eval mode on `device` (default: CUDA when available). A checkpoint
    that needs code of its own loads only with `trust_remote_code=True`: that code runs in this process.

    Fails fast with a one-line reason: `FileNotFoundError` for a path (starts with '.', '/' or '~', has more than
    one '/', starts with an existing directory, or is no valid Hub id) that is not a directory; `OSError` for a Hub
    id that is not cached when the Hub cannot be reached (`HF_HUB_OFFLINE`, or no answer within 3 s: without this
    probe huggingface_hub retries each file for ~25 s). A cached Hub id then loads from its cached snapshot."""
    import os

    from huggingface_hub import (
        HfApi,
        is_offline_mode,
        snapshot_download,
        try_to_load_from_cache,
    )
    from huggingface_hub.errors import (
        HfHubHTTPError,
        HFValidationError,
        RepositoryNotFoundError,
    )
    from huggingface_hub.utils import validate_repo_id

    name = str(model_name_or_path)
    path = Path(os.path.expanduser(name))
    if path.is_dir():
        name = str(path)
    else:
        if path.exists():
            raise NotADirectoryError(f"not a checkpoint directory: {name} is a file")
        try:
            validate_repo_id(name)
            hub_id = not (name.startswith((".", "~")) or (len(path.parts) > 1 and Path(path.parts[0]).is_dir()))
        except HFValidationError:
            hub_id = False
        if not hub_id:
            raise FileNotFoundError(f"no such checkpoint directory: {name} does not exist")
        cached = isinstance(try_to_load_from_cache(name, "config.json"), str)
        reason = "HF_HUB_OFFLINE is set" if is_offline_mode() else None
        if reason is None:
            try:  # one request, no retries
                HfApi().model_info(name, timeout=3)
            except RepositoryNotFoundError:
                raise OSError(f"{name} is neither a local directory nor a model on the Hub (a private one needs "
                              f"`hf auth login`)") from None
            except HfHubHTTPError:
                pass  # the Hub answered: let from_pretrained tell what is wrong
            except Exception as err:  # connection refused, DNS failure, timeout, proxy error
                reason = " ".join(f"no network: {type(err).__name__}: {err}".split())
        if reason is not None and not cached:
            raise OSError(f"cannot reach the Hub to download {name} ({reason}) and it is not cached: download it "
                          f"first (`hf download {name}`) or pass a local checkpoint directory")
        if reason is not None:  # the cached snapshot's directory: `local_files_only` would still look for adapters
            name = snapshot_download(name, local_files_only=True)
    from transformers import AutoModel, AutoProcessor

    with naming_damaged_weights(name):
        model = AutoModel.from_pretrained(name, trust_remote_code=trust_remote_code)
    processor = AutoProcessor.from_pretrained(name, trust_remote_code=trust_remote_code)
    if not (hasattr(model, "get_text_features") and hasattr(model, "get_image_features")):
        raise ValueError(f"{model_name_or_path} is a {type(model).__name__}: not a CLIP-style dual encoder")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device).eval(), processor
