"""The gallery pages that show a stored result (bench/gallery_results.py): each finds its files and its
stamp, shows the command that made them, and prints only numbers that the stored figures.json holds."""
import ast
import json
import os
import re
import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import gallery_results  # noqa: E402

GALLERY = ROOT / "docs" / "figures" / "gallery"


def reproduction_pages():
    """{NAME: page} for every examples/NN_reproduce_NAME.py."""
    return {p.stem.split("_reproduce_", 1)[1].replace("_", "-"): p
            for p in sorted((ROOT / "examples").glob("[0-9][0-9]_reproduce_*.py"))}


def stored_pages():
    """{NAME: page} for the pages that read docs/figures/gallery/NAME."""
    return {name: page for name, page in reproduction_pages().items()
            if f'"gallery" / "{name}"' in page.read_text()}


def test_the_stored_pages_are_the_scripts_list():
    assert stored_pages().keys() == gallery_results.STORED.keys(), \
        "the pages reading docs/figures/gallery/NAME and bench/gallery_results.py's STORED differ"
    for name, page in reproduction_pages().items():
        if name not in gallery_results.STORED:  # a live page runs the reproduction itself, never at --quick
            source = page.read_text()
            assert f'"reproduce", "{name}"' in source and '"--quick"' not in source, page.name


def test_every_stored_result_is_complete_and_stamped():
    assert gallery_results.main(["--check"]) == 0  # the files figures.json lists, stamp keys, command
    for name in gallery_results.STORED:
        stamp = json.loads((GALLERY / name / "stamp.json").read_text())
        assert stamp["name"] == name and stamp["made_by"] == "bench/gallery_results.py"
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", stamp["date"]), stamp["date"]
        assert re.match(r"[0-9a-f]{7,}", stamp["commit"]), stamp["commit"]
        assert stamp["cpu"] and stamp["cores"] >= 1 and stamp["cpu_seconds"] > 0
        assert stamp["wall_seconds"] >= stamp["compute_seconds"] > 0
        assert ("--tour" in stamp["command"]) == ("--tour" in stamp["sizes"]), stamp
        figures = json.loads((GALLERY / name / "figures.json").read_text())
        assert figures and all(not entry["quick"] and entry["name"] == name for entry in figures), name
        # Small files only: the figures as drawn (PNG) and two JSON files, no data arrays.
        files = sorted(p.name for p in (GALLERY / name).iterdir())
        assert files == sorted(gallery_results.stored_files(name)), f"{name}: {files}"
        assert all(p.stat().st_size < 400_000 for p in (GALLERY / name).iterdir()), name


def printed_names(page):
    """The figure and the number names a page prints: the `figures["FILE"]` it reads and the tuple its
    `for name in (...)` loop walks, in the order of the page."""
    tree = ast.parse(page.read_text())
    shown = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript) \
                and getattr(node.value.value, "id", None) == "figures":
            shown.append([node.value.slice.value, []])
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple) and shown:
            shown[-1][1] = [element.value for element in node.iter.elts]
    return shown


def test_each_stored_page_shows_its_command_and_numbers_the_stored_run_holds():
    for name, page in stored_pages().items():
        stamp = json.loads((GALLERY / name / "stamp.json").read_text())
        doc = ast.get_docstring(ast.parse(page.read_text()))
        assert stamp["command"] in doc, f"{page.name}: the docstring does not show `{stamp['command']}`"
        assert "--quick" not in page.read_text(), f"{page.name} still speaks of --quick"
        figures = {e["file"]: e["numbers"] for e in json.loads((GALLERY / name / "figures.json").read_text())}
        shown = printed_names(page)
        assert shown and all(names for _, names in shown), f"{page.name}: no table of numbers found"
        for file, names in shown:
            assert file in figures, f"{page.name} reads {file}, which the stored figures.json lacks"
            missing = [n for n in names if n not in figures[file]]
            assert not missing, f"{page.name} prints {missing}, which the stored figures.json lacks"


def test_the_stored_pages_run_as_the_site_runs_them():
    """Each page runs from examples/ (sphinx-gallery's working folder) in a few seconds, computing
    nothing, and prints the stored command, its conditions and the numbers."""
    pages = stored_pages()
    code = ("import runpy, sys\n"
            "for page in sys.argv[1:]:\n"
            "    print('=== ' + page, flush=True)\n"
            "    runpy.run_path(page, run_name='__main__')\n")
    env = dict(os.environ, MPLBACKEND="Agg", TOKENFLOW_CLI="/nonexistent/tokenflow")  # no page may run the CLI
    r = subprocess.run([sys.executable, "-c", code, *[str(p) for p in pages.values()]], cwd=ROOT / "examples",
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    outputs = dict(zip(pages, r.stdout.split("=== ")[1:]))
    for name, page in pages.items():
        stamp = json.loads((GALLERY / name / "stamp.json").read_text())
        text = outputs[name]
        assert stamp["command"] in text and stamp["cpu"] in text and stamp["date"] in text, f"{page.name}: {text}"
        for _, names in printed_names(page):
            assert all(n in text for n in names), f"{page.name}: {text}"


def test_make_docs_runs_stores_them_and_the_site_build_does_not():
    makefile = (ROOT / "Makefile").read_text()

    def recipe(target):
        found = re.search(rf"^{target}:.*?\n((?:\t.*\n)+)", makefile, flags=re.M)
        assert found, f"Makefile: no target {target}"
        return found.group(1)

    assert "bench/gallery_results.py" in recipe("docs-gallery")
    assert "docs-gallery" in recipe("docs-runs"), "make docs-runs does not rerun the stored reproductions"
    assert "gallery" not in recipe("docs"), "make docs must only read the stored results"
