"""
Reproduction: Energy dissipation of a gradient flow
===================================================

Softmax attention with A symmetric and V = A is a gradient flow: E(t) - E(0) equals the
integral of ``|dE|^2`` to the integrator's order; with V = R A it is not.

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce energy-dissipation --out out/energy-dissipation           # the full sizes
    tokenflow reproduce energy-dissipation --tour --out out/energy-dissipation    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/energy-dissipation``.

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
out = Path(tempfile.mkdtemp()) / "energy-dissipation"
subprocess.run([tokenflow_cli, "reproduce", "energy-dissipation", "--tour", "--out", str(out)], check=True)
figures = {entry["file"]: entry["numbers"] for entry in json.loads((out / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (energy-dissipation.png)
numbers = figures["energy-dissipation.png"]
for name in ("n",
             "T",
             "rk4 observed orders",
             "dopri5 gap (tol 1e-10)",
             "gap outside",
             "outside: E(T) - E(0)",
             "outside: int |dE|^2"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/energy-dissipation/energy-dissipation.png``
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(out / "energy-dissipation.png"))
ax.set_axis_off()
