"""Shared helpers for the PyTorch on GPUs course: one small module per concern (see the README)."""

COURSE = "pytorch-on-gpus"
"""Marks this package as the course's: each notebook's first cell checks it, since other code may be named helpers."""

__version__ = "0.4.0"
"""The version each notebook's first cell asks for; a release tag vX.Y.Z carries version X.Y.Z (colab/README.md)."""
