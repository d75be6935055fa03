"""
Reproduction: The equiangular reduction
=======================================

Equiangular tokens through ``simulate`` against the scalar ODE of rho(t): the reduction is
exact, and 1 - rho decays at rate 2.

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce equiangular --out out/equiangular           # the full sizes
    tokenflow reproduce equiangular --tour --out out/equiangular    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/equiangular``.

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
out = Path(tempfile.mkdtemp()) / "equiangular"
subprocess.run([tokenflow_cli, "reproduce", "equiangular", "--tour", "--out", str(out)], check=True)
figures = {entry["file"]: entry["numbers"] for entry in json.loads((out / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (equiangular.png)
numbers = figures["equiangular.png"]
for name in ("max |particles - ODE|",
             "rate fitted",
             "rate theory",
             "n",
             "beta"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/equiangular/equiangular.png``
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(out / "equiangular.png"))
ax.set_axis_off()
