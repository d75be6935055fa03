"""Sphinx configuration of the tokenflow documentation site (`make docs`).

The site is built from a clean clone with Debian's packages only and no network: furo (theme),
myst-parser (the Markdown pages of docs/), autodoc (the Python API, imported from the built
package: PYTHONPATH=build/python; numpydoc docstrings rendered by napoleon), breathe over doxygen's XML of include/tokenflow (the C++ API;
`make docs` runs doxygen first, into $TOKENFLOW_DOXYGEN_XML) and sphinx-gallery (examples/, each
script run at build time, so the numbers and figures shown are the code's). `make docs` passes -W:
every warning fails the build.
"""
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = (ROOT / os.environ.get("TOKENFLOW_BUILD_DIR", "build")).resolve()  # relative: to the root
sys.path.insert(0, str(BUILD / "python"))

import tokenflow  # noqa: E402  (the built package: autodoc and the version)
from sphinx_gallery.sorting import FileNameSortKey  # noqa: E402

project = "tokenflow"
author = "the tokenflow authors"
copyright = "the tokenflow authors (MIT License)"
version = release = tokenflow.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx_gallery.gen_gallery",
    "breathe",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "gallery/*.ipynb", "gallery/*.py", "gallery/*.md5", "gallery/*.zip"]
# The Markdown pages' relative links to files of the repository that are not pages (src/..., a
# .toml of experiments/) are links for readers of the repository; on the site they stay text.
suppress_warnings = ["myst.xref_missing"]
myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath"]

# No network: no intersphinx, and MathJax is Debian's copy (libjs-mathjax) when it is installed.
_mathjax = Path("/usr/share/javascript/mathjax/MathJax.js")
if _mathjax.exists():
    mathjax_path = "file://" + str(_mathjax) + "?config=TeX-AMS-MML_HTMLorMML"

html_theme = "furo"
html_title = f"tokenflow {release}"
html_static_path = []

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}

breathe_projects = {"tokenflow": os.environ.get("TOKENFLOW_DOXYGEN_XML", str(BUILD / "docs" / "doxygen" / "xml"))}
breathe_default_project = "tokenflow"
breathe_default_members = ("members",)

# The gallery: examples/*.py run in file order (their names are numbered), figures captured from
# matplotlib. Examples that need PyTorch are skipped (shown without output) when torch is missing.
os.environ.setdefault("TOKENFLOW_CLI", str(BUILD / "tokenflow"))
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ["CI"] = "1"  # no progress bars in the captured output
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BUILD / "python"), os.environ.get("PYTHONPATH")]))


def _gallery_filename_pattern() -> str:
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        return r"/(?!.*torch)[0-9][0-9]_.*\.py$"
    return r"/[0-9][0-9]_.*\.py$"


def _tokenflow_plot_scraper(block, block_vars, gallery_conf, **kwargs):
    """The figures of a gallery block: pyplot's (matplotlib's own scraper), and the Figures that
    tokenflow.plot returns, which live outside pyplot (it touches no pyplot state): those bound to a
    name of the example that no earlier block showed."""
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure
    from sphinx_gallery.scrapers import figure_rst, matplotlib_scraper

    shown = block_vars.setdefault("tokenflow_figures_shown", set())
    shown.update(id(plt.figure(n)) for n in plt.get_fignums())  # pyplot's: matplotlib's scraper
    rst = matplotlib_scraper(block, block_vars, gallery_conf, **kwargs)
    paths = []
    for value in list(block_vars["example_globals"].values()):
        if isinstance(value, Figure) and id(value) not in shown and value.canvas is not None:
            shown.add(id(value))
            path = next(block_vars["image_path_iterator"])
            value.savefig(path, dpi=100)
            paths.append(path)
    if not paths:
        return rst
    return rst + figure_rst(paths, gallery_conf["src_dir"])


sphinx_gallery_conf = {
    "image_scrapers": (_tokenflow_plot_scraper,),
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "gallery",
    "filename_pattern": _gallery_filename_pattern(),
    "ignore_pattern": r"/_",  # a file of examples/ whose name starts with "_" is not a page
    "within_subsection_order": FileNameSortKey,
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "only_warn_on_example_error": False,
    "plot_gallery": "True",
    "show_memory": False,
}


# Docstrings in numpydoc style (Parameters, Returns, Raises, Examples sections) become field lists
# through napoleon; the rest are plain text (formulas like |x - y|^2, examples as >>> lines), shown
# verbatim.
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_ivar = True  # a class's Attributes as a field list, not as objects of their own
napoleon_use_rtype = False
NUMPYDOC_SECTION = re.compile(r"^(Parameters|Returns|Yields|Raises|Attributes|Examples)\n-{3,}$", re.M)


def _docstring_as_text(app, what, name, obj, options, lines):
    """A docstring without numpydoc sections is shown verbatim, as a preformatted block (runs before
    napoleon, which turns the sections of the others into field lists)."""
    if not any(line.strip() for line in lines) or NUMPYDOC_SECTION.search("\n".join(lines)):
        return
    text = [line.rstrip() for line in lines]
    while text and not text[-1]:
        text.pop()
    lines[:] = ["::", ""] + ["    " + line if line else "" for line in text] + [""]


def setup(app):
    app.connect("autodoc-process-docstring", _docstring_as_text, priority=400)  # before napoleon's (500)
