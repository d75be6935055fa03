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

This page runs it at the small sizes of ``--quick`` (seconds, so that the site builds in
minutes; the figure says so in red, and the effect can be weaker than at full size): the
commands above give the result at the sizes it needs.
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
out = Path(tempfile.mkdtemp()) / "sphere"
subprocess.run([tokenflow_cli, "reproduce", "sphere", "--quick", "--out", str(out)], check=True)
figures = {entry["file"]: entry["numbers"] for entry in json.loads((out / "figures.json").read_text())}

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
# The figure the command drew, ``out/sphere/sphere.png``
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(out / "sphere.png"))
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
# The figure the command drew, ``out/sphere/sphere-beta.png``
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(out / "sphere-beta.png"))
ax.set_axis_off()
