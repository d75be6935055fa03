"""
Reproduction: Covariance trajectories in the PSD cone
=====================================================

2 x 2 covariance trajectories of the Gaussian closure in the PSD cone for softmax, l2,
multi-head and Sinkhorn attention, each classified; the blow-up times against the closed form.

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce cone --out out/cone           # the full sizes
    tokenflow reproduce cone --tour --out out/cone    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/cone``.

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
out = Path(tempfile.mkdtemp()) / "cone"
subprocess.run([tokenflow_cli, "reproduce", "cone", "--out", str(out)], check=True)
figures = {entry["file"]: entry["numbers"] for entry in json.loads((out / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (cone.png)
numbers = figures["cone.png"]
for name in ("starts per regime",
             "regimes per kind",
             "softmax: blow-up",
             "multihead: blow-up",
             "l2: grows",
             "sinkhorn: grows",
             "max |t_blowup - t*| / t* (closed forms)"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/cone/cone.png``
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(out / "cone.png"))
ax.set_axis_off()
