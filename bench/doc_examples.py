#!/usr/bin/python3
"""The examples of README.md and docs/: found once, for the test that runs them and for the numbers
the docs quote from them.

- Commands: the lines of ```sh blocks and the inline code spans that start with
  ``build/tokenflow``; spans with placeholders (``...``, DIR, KIND, NAME) are synopses, not examples.
- Python: the ```python blocks of each document.

Run as a script (`make docs-runs`), it runs, from the repository root and as written, every
example whose `--out` folder a page quotes numbers from (`<!-- from: out/NAME ... -->`, see
bench/update_docs.py); `make docs-numbers` then rewrites those numbers. TOKENFLOW_CLI, when set,
stands in for build/tokenflow.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDER = re.compile(r"\.\.\.|\bDIR\b|\bKIND\b|\bNAME\b")


def documents(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def split_fences(text: str):
    """(text with the fenced blocks blanked, [(language, body)])."""
    blocks = []

    def keep(m):
        blocks.append((m.group(1), m.group(2)))
        return "\n" * m.group(0).count("\n")

    return re.sub(r"^```(\w*)\n(.*?)^```", keep, text, flags=re.S | re.M), blocks


def shell_examples(root: Path = ROOT) -> list[tuple[str, str]]:
    """(document name, command) for every distinct command example, in document order (a command
    shown twice is listed once, under the first document that shows it)."""
    examples = []
    for doc in documents(root):
        body, blocks = split_fences(doc.read_text())
        for language, block in blocks:
            if language == "sh":
                examples += [(doc.name, line.split("  #")[0].strip()) for line in block.splitlines()
                             if line.startswith("build/tokenflow")]
        for m in re.finditer(r"`([^`]+)`", body):
            span = " ".join(m.group(1).split())  # a span may run over a line break
            if span.startswith("build/tokenflow ") and not PLACEHOLDER.search(span):
                examples.append((doc.name, span))
    seen = set()
    return [(doc, command) for doc, command in examples if not (command in seen or seen.add(command))]


def python_examples(root: Path = ROOT, without: tuple[str, ...] = ()):
    """(document name, its ```python blocks joined) for every document that has some; the blocks
    that contain one of the strings `without` are left out (the test leaves out the blocks that use
    tokenflow.torch where PyTorch is not installed)."""
    for doc in documents(root):
        blocks = [body for language, body in split_fences(doc.read_text())[1]
                  if language == "python" and not any(w in body for w in without)]
        if blocks:
            yield doc.name, "\n".join(blocks)


def out_folder(command: str) -> str | None:
    words = shlex.split(command)
    return words[words.index("--out") + 1] if "--out" in words[:-1] else None


def quoted_folders(root: Path = ROOT) -> set[str]:
    """The --out folders whose summary.json a page quotes (bench/update_docs.py's command_folders)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from update_docs import command_folders

    return set().union(*(command_folders(doc.read_text()) for doc in documents(root)))


def main() -> int:
    cli = os.environ.get("TOKENFLOW_CLI")
    wanted = quoted_folders()
    found = {}
    for doc, command in shell_examples():
        folder = out_folder(command)
        if folder in wanted and folder not in found:
            found[folder] = command
    missing = wanted - found.keys()
    if missing:
        print(f"doc_examples: no documented command writes {', '.join(sorted(missing))}", file=sys.stderr)
        return 2
    for folder, command in found.items():
        words = shlex.split(command)
        if cli:
            words[0] = cli
        print(f"$ {command}", flush=True)
        r = subprocess.run(words, cwd=ROOT, env=dict(os.environ, CI="1"))
        if r.returncode != 0:
            print(f"doc_examples: `{command}` exited {r.returncode}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
