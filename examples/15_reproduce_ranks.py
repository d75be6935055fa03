"""
Reproduction: The rank of the limiting covariance
=================================================

The rank of the limiting covariance for random Q of rank d // 2 with K = -Q: with V = I the
theory predicts (d + 1) // 2.

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce ranks --out out/ranks           # the full sizes
    tokenflow reproduce ranks --tour --out out/ranks    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/ranks``.

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
out = Path(tempfile.mkdtemp()) / "ranks"
subprocess.run([tokenflow_cli, "reproduce", "ranks", "--quick", "--out", str(out)], check=True)
figures = {entry["file"]: entry["numbers"] for entry in json.loads((out / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (ranks.png)
numbers = figures["ranks.png"]
for name in ("runs per d and V",
             "d = 3, V = I: runs with rank (d + 1) // 2 = 2",
             "d = 4, V = I: runs with rank (d + 1) // 2 = 2",
             "d = 5, V = I: runs with rank (d + 1) // 2 = 3"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/ranks/ranks.png``
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(out / "ranks.png"))
ax.set_axis_off()
