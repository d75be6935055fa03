"""
Reproduction: clustering at large n
===================================

10^5 tokens uniform on the circle (Q = K = V = I, beta = 9, on the sphere) gather into a
few clusters; the fast summation evaluates the attention in O(n).

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce clustering --out out/clustering           # the full sizes
    tokenflow reproduce clustering --tour --out out/clustering    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/clustering``.

The full sizes take longer than a page of the site's build should: this page shows
the first command's result as ``bench/gallery_results.py`` ran it and stored it in
``docs/figures/gallery/clustering/``: its ``figures.json``, the figure as drawn, and
``stamp.json`` (the command, sizes, commit, CPU, date, wall and CPU time: printed below).
``make docs-gallery`` runs it again.
"""
# %%
# The stored run: its command, sizes, machine and date (``stamp.json``), and its numbers
import json
from pathlib import Path

import matplotlib.image as mpimg
import matplotlib.pyplot as plt

# This repository's docs/figures/gallery/clustering/, from its root or from examples/
root = next(p for p in (Path.cwd(), *Path.cwd().parents) if (p / "docs" / "figures" / "gallery").is_dir())
stored = root / "docs" / "figures" / "gallery" / "clustering"
stamp = json.loads((stored / "stamp.json").read_text())
print(f"{stamp['command']}   ({stamp['sizes']})")
print(f"ran {stamp['date']} on {stamp['cpu']}, {stamp['cores']} cores (load {stamp['load']}), in "
      f"{stamp['wall_seconds']:.0f} s ({stamp['cpu_seconds']:.0f} s of CPU), at commit {stamp['commit']}")
figures = {entry["file"]: entry["numbers"] for entry in json.loads((stored / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (clustering.png)
numbers = figures["clustering.png"]
for name in ("n",
             "beta",
             "T",
             "clusters at T",
             "velocity evaluations by the fast summation",
             "densely"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/clustering/clustering.png`` (stored as drawn)
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(stored / "clustering.png"))
ax.set_axis_off()
