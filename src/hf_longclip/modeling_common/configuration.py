"""What the models' configurations share."""


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
