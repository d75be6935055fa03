#!/usr/bin/python3
"""Draws the README's figure by running the README's example as written.

The README's first ```python block (the one that saves "tokens.png") runs in a temporary folder
with the built package; the figure it writes becomes docs/figures/readme-tokens.png, and the
caption between `<!-- readme-figure -->` and `<!-- /readme-figure -->` is rewritten with the run's
sizes (from its summary), the date and the CPU. The flow is deterministic for a given seed (the
same numbers for any thread count), so the figure changes only when the code or the example does.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/readme_figure.py [--check]
(--check draws nothing and exits 1 when the caption or the figure is missing.)
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
FIGURE = ROOT / "docs" / "figures" / "readme-tokens.png"
CAPTION = re.compile(r"(<!-- readme-figure -->\n)(.*?)(<!-- /readme-figure -->)", re.S)
sys.path.insert(0, str(ROOT / "bench"))

from doc_examples import split_fences  # noqa: E402
from update_docs import cpu_model  # noqa: E402


def figure_example(text: str) -> str:
    """The README's first python block, which must save tokens.png."""
    for language, code in split_fences(text)[1]:
        if language == "python":
            if '"tokens.png"' not in code:
                raise SystemExit("readme_figure: the README's first python block does not save tokens.png")
            return code
    raise SystemExit("readme_figure: the README has no python block")


def cpu() -> str:
    """The CPU as lscpu names it, with its family and the cores this process may use."""
    family = ""
    try:
        family = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("cpu family")), "")
    except OSError:
        pass
    return f"{cpu_model()}{f' family {family}' if family else ''} ({len(os.sched_getaffinity(0))} cores)"


def caption(summary: dict, config_seed: str) -> str:
    import datetime

    date = datetime.date.today().isoformat()
    return (f"_The figure is `tokens.png` of the example above ({summary['n']} tokens in d = {summary['d']}, "
            f"T = {summary['t_final']:g} in {summary['steps']} steps, seed {config_seed}), drawn on {date} on "
            f"{cpu()} by `bench/readme_figure.py`, which runs the example as written._\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="draw nothing; exit 1 when the caption or figure is missing")
    args = ap.parse_args(argv)
    text = README.read_text()
    if not CAPTION.search(text):
        print("readme_figure: README.md has no <!-- readme-figure --> caption", file=sys.stderr)
        return 1 if args.check else 2
    code = figure_example(text)
    if args.check:
        return 0 if FIGURE.is_file() else 1
    os.environ.setdefault("MPLBACKEND", "Agg")
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            scope: dict = {}
            exec(compile(code, "README.md (first python block)", "exec"), scope)  # noqa: S102
            FIGURE.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(tmp) / "tokens.png", FIGURE)
        finally:
            os.chdir(cwd)
    r = scope["r"]
    seed = re.search(r'"seed":\s*(\d+)', code)  # the config's seed (summary.json does not hold it)
    README.write_text(CAPTION.sub(lambda m: m.group(1) + caption(r.summary, seed.group(1) if seed else "0 (default)")
                                  + m.group(3), text, 1))
    print(f"readme_figure: wrote {FIGURE.relative_to(ROOT)} and the caption in README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
