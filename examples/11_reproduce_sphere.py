"""
Reproduction: Clustering on the sphere
======================================

Tokens on the sphere under self-attention with Q = K = V = I gather into clusters, then one;
the fraction of clustered pairs against beta shows how long several clusters last.

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce sphere --out out/sphere           # the full sizes
    tokenflow reproduce sphere --tour --out out/sphere    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/sphere``.

The full sizes take longer than a page of the site's build should: this page shows
the first command's result as ``bench/gallery_results.py`` ran it and stored it in
``docs/figures/gallery/sphere/``: its ``figures.json``, the figure as drawn, and
``stamp.json`` (the command, sizes, commit, CPU, date, wall and CPU time: printed below).
``make docs-gallery`` runs it again.
"""
# %%
# The stored run: its command, sizes, machine and date (``stamp.json``), and its numbers
import json
from pathlib import Path

import matplotlib.image as mpimg
import matplotlib.pyplot as plt

# This repository's docs/figures/gallery/sphere/, from its root or from examples/
root = next(p for p in (Path.cwd(), *Path.cwd().parents) if (p / "docs" / "figures" / "gallery").is_dir())
stored = root / "docs" / "figures" / "gallery" / "sphere"
stamp = json.loads((stored / "stamp.json").read_text())
print(f"{stamp['command']}   ({stamp['sizes']})")
print(f"ran {stamp['date']} on {stamp['cpu']}, {stamp['cores']} cores (load {stamp['load']}), in "
      f"{stamp['wall_seconds']:.0f} s ({stamp['cpu_seconds']:.0f} s of CPU), at commit {stamp['commit']}")
figures = {entry["file"]: entry["numbers"] for entry in json.loads((stored / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (sphere.png)
numbers = figures["sphere.png"]
for name in ("n",
             "d",
             "beta",
             "T",
             "clusters at t = 0",
             "clusters at T"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/sphere/sphere.png`` (stored as drawn)
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(stored / "sphere.png"))
ax.set_axis_off()

# %%
# The numbers that matter, from figures.json (sphere-beta.png)
numbers = figures["sphere-beta.png"]
for name in ("betas",
             "clustered pairs at T, beta = 0.1",
             "clustered pairs at T, beta = 9"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/sphere/sphere-beta.png`` (stored as drawn)
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(stored / "sphere-beta.png"))
ax.set_axis_off()
