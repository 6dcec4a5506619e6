"""What the models' configurations share. The configurations are written as transformers' own were up to 5.4 and
as remote code still is (an `__init__` taking the fields, `super().__init__(**kwargs)`): 4.57 and 5.0-5.4 run
that `__init__` as it is, and 5.5 and later keep a subclass's own `__init__` when they make it a dataclass."""


def sub_config_dict(value) -> dict:
    """A sub-configuration given as None, a dict or a configuration, as the dict its class is built from (without
    `model_type`, which names the class, not a field): 4.57 builds CLIP's sub-configurations from dicts only."""
    if value is None:
        return {}
    as_dict = dict(value) if isinstance(value, dict) else value.to_dict()
    as_dict.pop("model_type", None)
    return as_dict


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
