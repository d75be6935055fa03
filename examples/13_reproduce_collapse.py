"""
Reproduction: Rank collapse
===========================

A Gaussian cloud under softmax attention with K = -Q of rank one, against the closed-form
covariance S(t) = (S0^-1 - t (A + A^T))^-1: the cloud flattens toward a line.

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce collapse --out out/collapse           # the full sizes
    tokenflow reproduce collapse --tour --out out/collapse    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/collapse``.

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
out = Path(tempfile.mkdtemp()) / "collapse"
subprocess.run([tokenflow_cli, "reproduce", "collapse", "--out", str(out)], check=True)
figures = {entry["file"]: entry["numbers"] for entry in json.loads((out / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (collapse.png)
numbers = figures["collapse.png"]
for name in ("n",
             "T",
             "eigenvalues at T",
             "closed form at T",
             "max relative gap to the closed form",
             "covariance rank at T (rank_tol 1e-3)"):
    value = numbers[name]
    if isinstance(value, list):  # the eigenvalues, each to 6 digits
        value = ", ".join(f"{v:.6g}" for v in value)
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/collapse/collapse.png``
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(out / "collapse.png"))
ax.set_axis_off()
