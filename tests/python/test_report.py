"""The demo report opens in headless Chromium with no console error and every image loaded."""
import os
from pathlib import Path

import pytest

from chromium import CHROMIUM, inspect_page
from conftest import load_json


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed (make test installs it)")
def test_report_opens_in_chromium(demo_dir):
    # The screenshot is left in the build folder for a person to look at (build/report-screenshot.png).
    shot = Path(os.environ.get("TOKENFLOW_SCREENSHOT_DIR", demo_dir)) / "report-screenshot.png"
    page = inspect_page((demo_dir / "report.html").as_uri(), screenshot=shot)
    assert page["title"] == "tokenflow demo"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    assert page["console_errors"] == [] and page["exceptions"] == [] and page["log_errors"] == []
    drawn = load_json(demo_dir / "figures.json")
    assert len(page["images"]) == len(drawn) > 0
    for image, entry in zip(page["images"], drawn):
        assert image["complete"] and image["width"] > 0 and image["height"] > 0, image
        assert image["alt"] == entry["title"]


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed (make test installs it)")
def test_a_broken_image_is_caught(tmp_path):
    """The check itself: a page with a missing image and a console error fails it."""
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><head><title>x</title></head><body>'
                    '<img src="data:image/png;base64,AAAA" alt="bad">'
                    '<script>console.error("boom")</script></body></html>')
    result = inspect_page(page.as_uri())
    assert result["images"][0]["width"] == 0
    assert [e["args"][0]["value"] for e in result["console_errors"]] == ["boom"]


def test_recompute_commands_reproduce_the_reports_numbers(demo_dir, tmp_path):
    # The report's "Recompute" command of a reproduction whose sizes differ between the demo and a
    # plain `reproduce NAME` gives the same data as the demo's own run (timings aside).
    from conftest import run_cli

    entry = next(e for e in load_json(demo_dir / "figures.json") if e["command"].startswith("tokenflow reproduce blowup"))
    args = entry["command"].split()[1:]
    assert args[-2:] == ["--out", "DIR"] and "--tour" in args
    run_cli(*args[:-1], tmp_path / "again", "--no-figures")
    ours, demo = load_json(tmp_path / "again" / "summary.json"), load_json(demo_dir / "blowup" / "summary.json")
    ours.pop("wall_seconds"), demo.pop("wall_seconds")
    assert ours == demo


def test_report_numbers_read_as_written():
    """format_number: its docstring example, and a dict (runs per rank) as "key: value" pairs."""
    import doctest

    import tokenflow.report as report

    result = doctest.testmod(report, verbose=False)
    assert result.attempted > 0 and result.failed == 0
    assert report.format_number({2: 99, 3: 1}) == "2: 99, 3: 1" and report.format_number({}) == "-"
    assert report.format_number(True) == "yes" and report.format_number(None) == "-"


def test_report_shows_each_explanation_beside_its_numbers(demo_dir):
    """The report's text is the figures.json explanation (fields filled), next to its own numbers."""
    import html

    page = (demo_dir / "report.html").read_text()
    for e in load_json(demo_dir / "figures.json"):
        section = page.split(f'<section id="{Path(e["file"]).stem}">')[1].split("</section>")[0]
        for line in e["explanation"].split("\n"):
            assert "{" not in line and html.escape(line) in section
        for key in e["numbers"]:
            assert f"<th>{html.escape(str(key))}</th>" in section
