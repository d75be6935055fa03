#!/usr/bin/python3
"""Computes the gallery's slow reproductions once, at the sizes each result needs, and stores them.

A gallery page runs what takes seconds while the site builds. The reproductions below take minutes
at the sizes their result needs, so their pages (examples/NN_reproduce_NAME.py) read what this
script stored instead: for each NAME, `tokenflow reproduce NAME [FLAGS] --out DIR` runs as a user
types it, and docs/figures/gallery/NAME/ receives

    figures.json   the command's own: every figure's file, title, explanation and numbers
    NAME*.png      the figures as the command drew them
    stamp.json     how they were made: the command, the sizes, the commit, the CPU, the date,
                   the command's wall time and CPU time (user + system, its threads and the
                   figures' Python together), its own computing time (summary.json's
                   wall_seconds) and the machine's load when it started

(no data arrays: the command writes those, and reruns them in the time the stamp says).

Run by hand from the repository root after `make build`, or through `make docs-gallery` (which
`make docs-runs` runs); the site's build only reads the stored files:
    /usr/bin/python3 bench/gallery_results.py                      # every one of STORED
    /usr/bin/python3 bench/gallery_results.py --only clustering    # one of them
    /usr/bin/python3 bench/gallery_results.py --check              # runs nothing: exit 1 when a
                                                                   # stored result is incomplete
The script writes only the files named above (a PNG that a previous figures.json listed and the
new one does not is removed); the temporary output folder is its own.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GALLERY = ROOT / "docs" / "figures" / "gallery"
sys.path.insert(0, str(ROOT / "bench"))
from update_docs import cpu_model  # noqa: E402

# The reproductions whose pages show a stored result, and the flags of the stored run: [] is the
# full sizes (a plain `reproduce NAME`), ["--tour"] the demo's, where the full sizes take far longer
# than the result needs to be seen (the page says so). The other reproductions take seconds at full
# size, and their pages run them as the site builds. The times of the stored runs are in their
# stamps, which the pages print.
STORED: dict[str, list[str]] = {
    "clustering": [],
    "sphere": [],
    "ranks": [],
    "meanfield": [],
    "universal-approximation": [],
}
STAMP_KEYS = ("name", "command", "sizes", "commit", "cpu", "cores", "load", "date", "wall_seconds",
              "cpu_seconds", "compute_seconds", "made_by")


def command_of(name: str) -> str:
    """The command as a user types it (the stored run's own --out is a temporary folder)."""
    return " ".join(["tokenflow", "reproduce", name, *STORED[name], "--out", f"out/{name}"])


def sizes_of(name: str) -> str:
    return "the demo's sizes (--tour)" if "--tour" in STORED[name] else "the full sizes"


def cpu() -> str:
    """The CPU as /proc/cpuinfo names it, with its family (e.g. "AMD EPYC family 26")."""
    family = ""
    try:
        family = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                       if line.startswith("cpu family")), "")
    except OSError:
        pass
    return f"{cpu_model()}{f' family {family}' if family else ''}"


def commit() -> str:
    """The checkout's commit, marked when the code (not the docs) has uncommitted changes."""
    def git(*args):
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short=10", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", "src", "include", "python", "CMakeLists.txt")
    return head + (" with uncommitted changes" if dirty else "")


def stored_files(name: str) -> list[str]:
    """The files of NAME's stored result: figures.json's PNGs, figures.json and stamp.json."""
    folder = GALLERY / name
    listed = json.loads((folder / "figures.json").read_text()) if (folder / "figures.json").is_file() else []
    return [entry["file"] for entry in listed] + ["figures.json", "stamp.json"]


def run(name: str, cli: Path, timeout: float) -> dict:
    """Runs NAME's stored command into a temporary folder and stores its figures; returns the stamp."""
    with tempfile.TemporaryDirectory(prefix=f"tf-gallery-{name}-") as work:
        out = Path(work) / name
        argv = [str(cli), "reproduce", name, *STORED[name], "--out", str(out)]
        load = os.getloadavg()[0]
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        done = subprocess.run(argv, env={**os.environ, "CI": "1"}, timeout=timeout,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wall = time.monotonic() - start
        now = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_seconds = now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime
        if done.returncode != 0:
            raise SystemExit(f"gallery_results: {' '.join(argv)} exited {done.returncode}:\n{done.stdout}")
        figures = json.loads((out / "figures.json").read_text())
        if any(entry.get("quick") for entry in figures):
            raise SystemExit(f"gallery_results: {name}: figures.json says --quick sizes")
        summary = json.loads((out / "summary.json").read_text())
        stamp = {"name": name, "command": command_of(name), "sizes": sizes_of(name), "commit": commit(),
                 "cpu": cpu(), "cores": len(os.sched_getaffinity(0)), "load": round(load, 1),
                 "date": datetime.date.today().isoformat(), "wall_seconds": round(wall, 1),
                 "cpu_seconds": round(cpu_seconds, 1),
                 "compute_seconds": round(float(summary["wall_seconds"]), 1),
                 "made_by": "bench/gallery_results.py"}
        store(name, out, figures, stamp)
    return stamp


def store(name: str, out: Path, figures: list, stamp: dict) -> None:
    """Replaces NAME's stored files with this run's: each written beside its place, then renamed."""
    folder = GALLERY / name
    folder.mkdir(parents=True, exist_ok=True)
    old = set(stored_files(name))
    new = [entry["file"] for entry in figures]
    for file in new:
        shutil.copyfile(out / file, folder / f".{file}.tmp")
        os.replace(folder / f".{file}.tmp", folder / file)
    for file, value in (("figures.json", figures), ("stamp.json", stamp)):
        (folder / f".{file}.tmp").write_text(json.dumps(value, indent=2) + "\n")
        os.replace(folder / f".{file}.tmp", folder / file)
    for file in sorted(old - set(new) - {"figures.json", "stamp.json"}):
        (folder / file).unlink(missing_ok=True)


def problems(name: str) -> list[str]:
    """What is missing or inconsistent in NAME's stored result (empty when it is complete)."""
    folder = GALLERY / name
    where = folder.relative_to(ROOT)
    if not (folder / "figures.json").is_file() or not (folder / "stamp.json").is_file():
        return [f"{where}: no figures.json or stamp.json (run bench/gallery_results.py --only {name})"]
    found = []
    stamp = json.loads((folder / "stamp.json").read_text())
    found += [f"{where}/stamp.json: no {key}" for key in STAMP_KEYS if key not in stamp]
    if stamp.get("command") != command_of(name):
        found.append(f"{where}/stamp.json: command {stamp.get('command')!r}, not {command_of(name)!r} "
                     f"(rerun bench/gallery_results.py --only {name})")
    for entry in json.loads((folder / "figures.json").read_text()):
        if not (folder / entry["file"]).is_file():
            found.append(f"{where}: figures.json lists {entry['file']}, which is missing")
        if entry.get("quick"):
            found.append(f"{where}/figures.json: {entry['file']} is at --quick sizes")
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cli", type=Path, default=Path(os.environ.get("TOKENFLOW_CLI", ROOT / "build" / "tokenflow")),
                   help="the tokenflow CLI (default: $TOKENFLOW_CLI or build/tokenflow)")
    p.add_argument("--only", nargs="*", choices=sorted(STORED), help="these reproductions (default: all)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds a reproduction may take")
    p.add_argument("--check", action="store_true", help="run nothing; exit 1 when a stored result is incomplete")
    args = p.parse_args(argv)
    names = args.only or list(STORED)
    if args.check:
        found = [line for name in names for line in problems(name)]
        for line in found:
            print(f"gallery_results: {line}", file=sys.stderr)
        return 1 if found else 0
    if not args.cli.is_file():
        print(f"gallery_results: no CLI at {args.cli} (make build first, or --cli)", file=sys.stderr)
        return 2
    for name in names:
        stamp = run(name, args.cli, args.timeout)
        print(f"gallery_results: {name}: {stamp['command']} took {stamp['wall_seconds']} s on {stamp['cpu']} "
              f"({stamp['cores']} cores, load {stamp['load']}) -> {(GALLERY / name).relative_to(ROOT)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
