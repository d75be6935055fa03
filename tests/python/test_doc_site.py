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
