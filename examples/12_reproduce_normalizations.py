"""
Reproduction: Softmax against Sinkhorn attention
================================================

The same tokens and logits normalized by softmax (rows only) and by Sinkhorn (rows and
columns): softmax is row-stochastic, Sinkhorn doubly stochastic.

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce normalizations --out out/normalizations           # the full sizes
    tokenflow reproduce normalizations --tour --out out/normalizations    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/normalizations``.

This page runs it at the demo's sizes (``--tour``), as ``make demo`` does.
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
out = Path(tempfile.mkdtemp()) / "normalizations"
subprocess.run([tokenflow_cli, "reproduce", "normalizations", "--tour", "--out", str(out)], check=True)
figures = {entry["file"]: entry["numbers"] for entry in json.loads((out / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (normalizations.png)
numbers = figures["normalizations.png"]
for name in ("n",
             "softmax: max |row sum - 1|",
             "softmax: max |column sum - 1|",
             "Sinkhorn: max |row sum - 1|",
             "Sinkhorn: max |column sum - 1|"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/normalizations/normalizations.png``
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(out / "normalizations.png"))
ax.set_axis_off()
