"""
Reproduction: The energy is not geodesically convex
===================================================

The energy of A = -I along Wasserstein geodesics: second differences below minus their
rounding bound through the origin certify that it is not convex.

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce nonconvexity --out out/nonconvexity           # the full sizes
    tokenflow reproduce nonconvexity --tour --out out/nonconvexity    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/nonconvexity``.

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
out = Path(tempfile.mkdtemp()) / "nonconvexity"
subprocess.run([tokenflow_cli, "reproduce", "nonconvexity", "--tour", "--out", str(out)], check=True)
figures = {entry["file"]: entry["numbers"] for entry in json.loads((out / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (nonconvexity.png)
numbers = figures["nonconvexity.png"]
for name in ("n",
             "min second difference (particles, through the origin)",
             "its rounding bound",
             "certified witness",
             "min second difference away from the origin"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/nonconvexity/nonconvexity.png``
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(out / "nonconvexity.png"))
ax.set_axis_off()
