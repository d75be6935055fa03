"""
Reproduction: Universal approximation by Sinkhorn Transformers
==============================================================

Sinkhorn Transformers of growing width trained on entropic OT: the test W_1 to the target
couplings falls with capacity, below the independent coupling's.

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce universal-approximation --out out/universal-approximation           # the full sizes
    tokenflow reproduce universal-approximation --tour --out out/universal-approximation    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/universal-approximation``.

The full sizes take longer than a page of the site's build should: this page shows
the first command's result as ``bench/gallery_results.py`` ran it and stored it in
``docs/figures/gallery/universal-approximation/``: its ``figures.json``, the figure as drawn, and
``stamp.json`` (the command, sizes, commit, CPU, date, wall and CPU time: printed below).
``make docs-gallery`` runs it again.
"""
# %%
# The stored run: its command, sizes, machine and date (``stamp.json``), and its numbers
import json
from pathlib import Path

import matplotlib.image as mpimg
import matplotlib.pyplot as plt

# This repository's docs/figures/gallery/universal-approximation/, from its root or from examples/
root = next(p for p in (Path.cwd(), *Path.cwd().parents) if (p / "docs" / "figures" / "gallery").is_dir())
stored = root / "docs" / "figures" / "gallery" / "universal-approximation"
stamp = json.loads((stored / "stamp.json").read_text())
print(f"{stamp['command']}   ({stamp['sizes']})")
print(f"ran {stamp['date']} on {stamp['cpu']}, {stamp['cores']} cores (load {stamp['load']}), in "
      f"{stamp['wall_seconds']:.0f} s ({stamp['cpu_seconds']:.0f} s of CPU), at commit {stamp['commit']}")
figures = {entry["file"]: entry["numbers"] for entry in json.loads((stored / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (universal-approximation.png)
numbers = figures["universal-approximation.png"]
for name in ("models",
             "W_1 smallest model",
             "W_1 largest model",
             "W_1 independent coupling",
             "falls with capacity"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``universal-approximation.png`` (stored as drawn)
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(stored / "universal-approximation.png"))
ax.set_axis_off()
