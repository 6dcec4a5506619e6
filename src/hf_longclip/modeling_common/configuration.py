"""What the models' configurations share."""

import warnings


def drop_training_options(kwargs: dict, names: tuple[str, ...], task: str) -> dict:
    """`kwargs` without the training options `names`, which configurations saved by earlier versions carry (they
    are now arguments of `task`); one warning names the ones dropped, so that such checkpoints still load."""
    dropped = sorted(name for name in names if name in kwargs)
    if dropped:
        warnings.warn(f"ignoring training options saved in the configuration by an earlier version: {dropped} "
                      f"(they are arguments of {task} now, not part of the model)", stacklevel=3)
    return {key: value for key, value in kwargs.items() if key not in names}


class RefusesPlainCLIPMixin:
    """For the configurations of models built from CLIP (`from_clip`): `from_pretrained` of a plain CLIP checkpoint
    (model_type "clip") into the model fails at once, naming `from_clip`, instead of on a weight's shape."""

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path, **kwargs):
        config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        if config_dict.get("model_type") == "clip" != cls.model_type:
            model = cls.__name__.removesuffix("Config") + "Model"
            path = str(pretrained_model_name_or_path)
            raise ValueError(f"{path} holds a plain CLIP checkpoint (model_type 'clip'), not a {model}: build one "
                             f"from it with {model}.from_clip({path!r})")
        return config_dict, kwargs
