"""
Reproduction: The mean-field limit
==================================

The distance of n particles to the Gaussian closure against n, log-log: the theory predicts
the rate n^-1/2.

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce meanfield --out out/meanfield           # the full sizes
    tokenflow reproduce meanfield --tour --out out/meanfield    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/meanfield``.

The full sizes take longer than a page of the site's build should: this page shows
the first command's result as ``bench/gallery_results.py`` ran it and stored it in
``docs/figures/gallery/meanfield/``: its ``figures.json``, the figure as drawn, and
``stamp.json`` (the command, sizes, commit, CPU, date, wall and CPU time: printed below).
``make docs-gallery`` runs it again.
"""
# %%
# The stored run: its command, sizes, machine and date (``stamp.json``), and its numbers
import json
from pathlib import Path

import matplotlib.image as mpimg
import matplotlib.pyplot as plt

# This repository's docs/figures/gallery/meanfield/, from its root or from examples/
root = next(p for p in (Path.cwd(), *Path.cwd().parents) if (p / "docs" / "figures" / "gallery").is_dir())
stored = root / "docs" / "figures" / "gallery" / "meanfield"
stamp = json.loads((stored / "stamp.json").read_text())
print(f"{stamp['command']}   ({stamp['sizes']})")
print(f"ran {stamp['date']} on {stamp['cpu']}, {stamp['cores']} cores (load {stamp['load']}), in "
      f"{stamp['wall_seconds']:.0f} s ({stamp['cpu_seconds']:.0f} s of CPU), at commit {stamp['commit']}")
figures = {entry["file"]: entry["numbers"] for entry in json.loads((stored / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (meanfield.png)
numbers = figures["meanfield.png"]
for name in ("n from",
             "n to",
             "samples per n",
             "fitted slope (from N(m0, S0))",
             "fitted slope (from the sample's moments)",
             "predicted slope"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/meanfield/meanfield.png`` (stored as drawn)
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(stored / "meanfield.png"))
ax.set_axis_off()
