"""
Reproduction: The long-context phase transition
===============================================

With beta = gamma log n, the time equiangular tokens take to cluster stays bounded (up to
log n) below gamma_c = 1/(1 - rho0) and grows like a power of n above.

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce long-context --out out/long-context           # the full sizes
    tokenflow reproduce long-context --tour --out out/long-context    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/long-context``.

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
out = Path(tempfile.mkdtemp()) / "long-context"
subprocess.run([tokenflow_cli, "reproduce", "long-context", "--tour", "--out", str(out)], check=True)
figures = {entry["file"]: entry["numbers"] for entry in json.loads((out / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (long-context.png)
numbers = figures["long-context.png"]
for name in ("critical gamma (rho0 = 0)",
             "theory",
             "critical gamma (rho0 = 1/2)",
             "theory (rho0 = 1/2)",
             "n max (reduction)",
             "particles: largest relative gap to the reduction's time"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/long-context/long-context.png``
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(out / "long-context.png"))
ax.set_axis_off()
