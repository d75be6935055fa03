"""
Reproduction: Blow-up at the closed-form time
=============================================

Softmax attention (Q = K = I) blows up at the closed-form time t*, l2 attention stays
finite; the particles follow the moment ODE.

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce blowup --out out/blowup           # the full sizes
    tokenflow reproduce blowup --tour --out out/blowup    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/blowup``.

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
out = Path(tempfile.mkdtemp()) / "blowup"
subprocess.run([tokenflow_cli, "reproduce", "blowup", "--tour", "--out", str(out)], check=True)
figures = {entry["file"]: entry["numbers"] for entry in json.loads((out / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (blowup.png)
numbers = figures["blowup.png"]
for name in ("predicted t*",
             "softmax: blow-up time of the ODE",
             "relative error",
             "l2: status",
             "softmax: n particles"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/blowup/blowup.png``
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(out / "blowup.png"))
ax.set_axis_off()
