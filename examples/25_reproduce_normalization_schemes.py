"""
Reproduction: Normalization schemes as speed regulation
=======================================================

Post-LN, Pre-LN, Peri-LN, nGPT and Mix-LN on the same tokens: clustering times beside the
equiangular reduction's, e^{-2t} against r^{-2} at the cluster.

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce normalization-schemes --out out/normalization-schemes           # the full sizes
    tokenflow reproduce normalization-schemes --tour --out out/normalization-schemes    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/normalization-schemes``.

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
out = Path(tempfile.mkdtemp()) / "normalization-schemes"
subprocess.run([tokenflow_cli, "reproduce", "normalization-schemes", "--out", str(out)], check=True)
figures = {entry["file"]: entry["numbers"] for entry in json.loads((out / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (normalization-schemes.png)
numbers = figures["normalization-schemes.png"]
for name in ("n",
             "t Post-LN",
             "t Post-LN (theory)",
             "t Pre-LN",
             "t Pre-LN (theory)",
             "t nGPT",
             "t nGPT (theory)",
             "rate Post-LN",
             "exponent Pre-LN"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/normalization-schemes/normalization-schemes.png``
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(out / "normalization-schemes.png"))
ax.set_axis_off()
