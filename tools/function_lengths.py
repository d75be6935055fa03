#!/usr/bin/python3
"""The functions of src/ longer than a limit (STYLE: none over 100 lines), from Universal Ctags.

    tools/function_lengths.py [--limit 100] [--top N] [ROOT]

Prints "lines  function  file:line" for every function definition over --limit lines (with --top,
the N longest whatever their length) and exits 1 when one is over the limit. A function's length
is its definition's span, first line to closing brace, comments and blank lines included; lambdas
count as part of the function they are written in. Needs universal-ctags (Debian package).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def function_lengths(root: Path = ROOT, folder: str = "src") -> list[tuple[int, str, str, int]]:
    """(lines, name, path relative to root, first line) of every C++ function defined under folder,
    longest first."""
    ctags = shutil.which("ctags-universal") or shutil.which("ctags")
    if ctags is None:
        raise RuntimeError("tools/function_lengths.py needs universal-ctags (apt-get install universal-ctags)")
    out = subprocess.run([ctags, "-R", "--languages=C++", "--kinds-C++=f", "--fields=+ne", "--output-format=json",
                          "-f", "-", folder], cwd=root, capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        tag = json.loads(line)
        if tag.get("_type") != "tag" or "end" not in tag or tag["name"].startswith("__anon"):
            continue
        scope = [part for part in tag.get("scope", "").split("::") if part and not part.startswith("__anon")]
        found.append((tag["end"] - tag["line"] + 1, "::".join(scope + [tag["name"]]), tag["path"], tag["line"]))
    return sorted(found, reverse=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", type=Path, default=ROOT)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--top", type=int, default=0)
    args = parser.parse_args()
    lengths = function_lengths(args.root)
    over = [f for f in lengths if f[0] > args.limit]
    for lines, name, path, first in lengths[:args.top] if args.top else over:
        print(f"{lines:5d}  {name}  {path}:{first}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
