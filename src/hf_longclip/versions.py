"""The transformers releases the library's tests ran on, oldest and newest (pyproject.toml's lower bound is the
oldest): stated in every generated remote-code file (`export`) and in each model card (`training.hub`)."""

TESTED_TRANSFORMERS = ("5.23.0", "5.24.0")
