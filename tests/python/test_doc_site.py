"""The documentation site's sources: every public Python name is on the API page, and every gallery
example is a titled script (sphinx-gallery needs the title; the site's build runs the scripts)."""
import ast
import re

import tokenflow
from conftest import ROOT


def test_every_public_name_is_on_the_api_page():
    page = (ROOT / "docs" / "api-python.md").read_text()
    documented = set(re.findall(r"^\.\. auto(?:function|class|exception):: tokenflow\.(\w+)$", page, re.MULTILINE))
    missing = sorted(set(tokenflow.__all__) - {"__version__"} - documented)
    assert not missing, f"docs/api-python.md does not list {missing}"


def test_every_gallery_example_has_a_title():
    examples = sorted((ROOT / "examples").glob("[0-9][0-9]_*.py"))
    assert len(examples) >= 19  # the tasks of the gallery and one page per reproduction
    for path in examples:
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc, f"{path.name}: no docstring"
        title, underline = doc.splitlines()[:2]
        assert underline == "=" * len(title), f"{path.name}: the title's underline"


def test_every_reproduction_has_a_gallery_example():
    from conftest import run_cli
    names = [line.split()[0] for line in run_cli("reproduce", "--list").stdout.splitlines() if line.strip()]
    examples = {p.stem.split("_reproduce_", 1)[1].replace("_", "-") for p in (ROOT / "examples").glob("*_reproduce_*.py")}
    assert set(names) <= examples, f"reproductions without a gallery example: {sorted(set(names) - examples)}"


def _build_api_page(tmp_path):
    """The API page alone, built by Sphinx with docs/conf.py's settings (autodoc, napoleon, myst; the
    gallery and the C++ API left out) and warnings as errors; returns its HTML."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    for module in ("sphinx", "myst_parser", "sphinx_gallery"):
        pytest.importorskip(module)
    src = tmp_path / "src"
    src.mkdir()
    # Its links to the other pages as text (they are not built here).
    page = (ROOT / "docs" / "api-python.md").read_text()
    (src / "api-python.md").write_text(re.sub(r"\[([^\]]+)\]\([\w./-]+\.md(#[\w-]*)?\)", r"\1", page))
    (src / "index.md").write_text("# API\n\n```{toctree}\napi-python\n```\n")
    conf = ROOT / "docs" / "conf.py"
    (src / "conf.py").write_text(
        f"_ns = {{'__file__': {str(conf)!r}, '__name__': 'conf'}}\n"
        f"exec(compile(open({str(conf)!r}).read(), {str(conf)!r}, 'exec'), _ns)\n"
        "globals().update({k: v for k, v in _ns.items() if not k.startswith('__')})\n"
        "extensions = [e for e in extensions if e not in ('sphinx_gallery.gen_gallery', 'breathe')]\n")
    build = Path(tokenflow.__file__).resolve().parent.parent.parent  # the build folder of the package under test
    env = dict(__import__("os").environ, TOKENFLOW_BUILD_DIR=str(build), MPLBACKEND="Agg")
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(src),
                        str(tmp_path / "html")], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return (tmp_path / "html" / "api-python.html").read_text()


def test_the_api_page_lists_parameters(tmp_path):
    """Each function the API page lists by name, and tokenflow.tasks' functions, render their numpydoc
    sections as field lists (Parameters with types and defaults, Returns, Raises), not as a block of
    preformatted text."""
    import tokenflow.tasks

    html = _build_api_page(tmp_path)
    page = (ROOT / "docs" / "api-python.md").read_text()
    names = re.findall(r"^\.\. autofunction:: ([\w.]+)$", page, re.MULTILINE)
    names += ["tokenflow.torch.SinkhornLayer", "tokenflow.torch.SinkhornLayer.forward"]  # the class: its constructor's
    names += [f"tokenflow.tasks.{n}" for n in ("sample", "describe", "check", "load", "pack", "save")]
    names += [f"tokenflow.SinkhornTransformer.{n}" for n in ("load", "couple")]
    names += [f"tokenflow.pot.{n}" for n in ("unif", "dist", "sinkhorn", "sinkhorn2", "emd", "emd2")]
    assert len(names) >= 20 and hasattr(tokenflow.tasks, "sample")
    for name in names:
        start = html.find(f'id="{name}"')
        assert start >= 0, f"{name} is not on the built API page"
        end = html.find('<dt class="sig sig-object py"', start + 1)
        body = html[start:end if end > 0 else len(html)]
        assert 'class="field-list' in body and ">Parameters" in body, f"{name}: no parameter list on the built page"


def test_no_gallery_page_calls_a_hidden_helper():
    """A gallery page shows the calls a user types: it imports no module of examples/ (a helper the
    page does not show), and a reproduction's page shows `tokenflow reproduce NAME`, runs it in its own
    code or reads the run bench/gallery_results.py stored (test_gallery_results.py checks those), and
    prints the numbers that matter."""
    local = {p.stem for p in (ROOT / "examples").glob("*.py")}
    for path in sorted((ROOT / "examples").glob("[0-9][0-9]_*.py")):
        source = path.read_text()
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            assert not any(n.split(".")[0] in local or n.startswith("_") for n in names), \
                f"{path.name} imports {names}, a helper of examples/ that the page does not show"
        assert "sys.path.insert" not in source, f"{path.name}: imports from its own folder"
        if "_reproduce_" in path.stem:
            name = path.stem.split("_reproduce_", 1)[1].replace("_", "-")
            assert f"tokenflow reproduce {name} " in ast.get_docstring(tree), f"{path.name} does not show the command"
            assert f'"reproduce", "{name}"' in source or f'"gallery" / "{name}"' in source, \
                f"{path.name} neither runs `reproduce {name}` itself nor reads its stored result"
            assert "print(" in source, f"{path.name} prints no numbers"
