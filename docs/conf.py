"""Sphinx settings for the course website. Build it with ``python tools/site.py`` (see the README), which stages the
README, the Colab and Kaggle guide and the committed notebooks beside this file and runs Sphinx over them offline."""

project = "PyTorch on GPUs"
author = "The PyTorch on GPUs course authors"
copyright = "the course authors, MIT licence"

extensions = ["myst_nb"]
exclude_patterns = ["_build"]
# Committed outputs are the content: nothing is executed while the site is built.
nb_execution_mode = "off"
# The widget manager and require.js are served from the site itself (tools/site.py copies them into _static/widgets),
# so the progress bars render without a network.
nb_ipywidgets_js = {
    "widgets/require.js": {},
    "widgets-paths.js": {},
    "widgets/embed-amd.js": {},
}
myst_enable_extensions = ["colon_fence", "html_image"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]  # lessons may go from a title straight to ### in a markdown cell

html_theme = "sphinx_book_theme"
html_title = "PyTorch on GPUs"
html_static_path = ["_static"]
html_last_updated_fmt = None
# tools/site.py adds "repository_url", from pyproject.toml's [project.urls] Repository.
html_theme_options = {
    "use_repository_button": True,
    "show_toc_level": 2,
    "home_page_in_toc": True,
}
# The theme's colour mode: without a default it logs "invalid theme mode" to the console on a first visit.
html_context = {"default_mode": "light"}
