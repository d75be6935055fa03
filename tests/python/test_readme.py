"""README.md is a first page people finish: what the tool is, how to set it up within its first 40
lines, short examples with a figure made by a script, and links that lead somewhere. The measured
tables live in docs/ (their generated blocks are checked by test_update_docs.py wherever they are)."""
import re
import sys

from conftest import ROOT

README = (ROOT / "README.md").read_text()
LINES = README.splitlines()
MAX_LINES = 150  # the README was 451 lines when its capability tables came before its set-up


def test_the_readme_is_short():
    assert len(LINES) <= MAX_LINES, f"README.md has {len(LINES)} lines (at most {MAX_LINES}); move details to docs/"


def test_setup_within_the_first_40_lines():
    """`make demo` and `make test` as commands (in a sh block) within the first 40 lines."""
    head = "\n".join(LINES[:40])
    blocks = re.findall(r"^```sh\n(.*?)^```", head, flags=re.S | re.M)
    commands = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    assert "make demo" in commands and "make test" in commands, "README.md: set-up (make demo, make test) not within its first 40 lines"


def test_no_measured_tables_in_the_readme():
    """The generated capability and speed tables are docs pages' (docs/capabilities.md, speed.md, ot.md)."""
    assert "<!-- generated:" not in README and "<!-- from:" not in README
    assert max(sum(1 for line in LINES if line.startswith("|")), 0) <= 12, "README.md: tables belong in docs/"


def test_three_examples_with_a_figure():
    python_blocks = re.findall(r"^```python\n", README, flags=re.M)
    assert len(python_blocks) >= 3
    images = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", README)
    assert images, "README.md shows no figure"
    for image in images:
        assert (ROOT / image).is_file(), f"README.md shows {image}, which is not in the repository"


def test_the_figure_names_its_script_and_conditions():
    """The caption is rewritten by bench/readme_figure.py: sizes, date and CPU."""
    caption = re.search(r"<!-- readme-figure -->\n(.*?)<!-- /readme-figure -->", README, flags=re.S)
    assert caption, "README.md: no <!-- readme-figure --> caption"
    text = caption.group(1)
    assert "`bench/readme_figure.py`" in text and re.search(r"\d{4}-\d\d-\d\d", text)
    sys.path.insert(0, str(ROOT / "bench"))
    import update_docs

    assert update_docs.cpu_model().split()[0] in text and re.search(r"\d+ tokens", text)
    assert (ROOT / "bench" / "readme_figure.py").is_file()
    # `make docs-runs` redraws it with the other commands the docs show.
    recipe = re.search(r"^docs-runs:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), flags=re.M)
    assert recipe and "bench/readme_figure.py" in recipe.group(1), "make docs-runs does not draw the README's figure"


def test_links_lead_to_files_of_the_repository():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if "://" in target:
            continue
        assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"
