"""The transformers releases the library is tested on, oldest and newest (pyproject.toml's lower bound is the oldest),
and those its checkpoints load on where hf-longclip is not installed (scripts/compat_matrix.py, whose last run is
docs/compatibility.md): stated in every generated remote-code file (`export`) and in each model card
(`training.hub`)."""

TESTED_TRANSFORMERS = ("5.23.0", "5.24.0")
CHECKPOINTS_LOAD_ON = "4.57 and every 5.x minor from 5.0 to 5.24"
