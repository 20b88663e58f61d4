"""Shared helpers for the PyTorch on GPUs course: one small module per concern (see the README)."""

__version__ = "0.1.0"
