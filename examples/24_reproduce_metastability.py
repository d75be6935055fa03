"""
Reproduction: Dynamic metastability
===================================

Softmax attention on the circle at large beta: the energy climbs a staircase of plateaus,
and two clusters escape each other in a time that grows like e^{beta (1 - cos delta)}.

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce metastability --out out/metastability           # the full sizes
    tokenflow reproduce metastability --tour --out out/metastability    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/metastability``.

This page runs the first command, the full sizes (seconds), as the site builds.
"""
# %%
# Run the reproduction as from a shell, into a temporary folder
import json
import os
import subprocess
import tempfile
from pathlib import Path

import matplotlib.image as mpimg
import matplotlib.pyplot as plt

tokenflow_cli = os.environ.get("TOKENFLOW_CLI", "tokenflow")  # the CLI this site was built with
out = Path(tempfile.mkdtemp()) / "metastability"
subprocess.run([tokenflow_cli, "reproduce", "metastability", "--out", str(out)], check=True)
figures = {entry["file"]: entry["numbers"] for entry in json.loads((out / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (metastability.png)
numbers = figures["metastability.png"]
for name in ("beta",
             "plateaus at the largest beta",
             "log escape time slope",
             "closed-form slope",
             "largest relative gap to the closed form"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/metastability/metastability.png``
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(out / "metastability.png"))
ax.set_axis_off()
