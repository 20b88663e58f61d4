"""Maintainer tooling, run from the clone's root and never installed for learners (the installed packages are
``helpers``, ``lessons`` and ``exercises``).

``python -m tools.course run`` executes the lessons; ``python -m tools.launch sync|check|map`` keeps their Colab and
Kaggle badges, runtime metadata and bootstrap in step; ``python -m tools.gpu_check`` (also ``python -m tools.course
gpu-check``) runs every lesson and the speedrun on a CUDA GPU; ``python tools/site.py`` builds the website;
``python tools/ddp_stress.py`` launches the DDP job many times under load; ``python -m tools.helper_lines`` counts the
helper code each lesson's cells name.
"""
