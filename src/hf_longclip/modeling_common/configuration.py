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
