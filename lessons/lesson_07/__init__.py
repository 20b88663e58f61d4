"""Lesson 07's two files: ``ddp_train.py``, the DDP script the lesson prints and torchrun runs, and ``harness.py``,
which runs that script's own ``setup`` and ``train`` with the course's checks and its failure demonstration around
them."""
