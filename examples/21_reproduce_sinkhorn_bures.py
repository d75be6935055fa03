"""
Reproduction: The Sinkhorn closure as a Bures-Wasserstein gradient flow
=======================================================================

The Sinkhorn Gaussian closure against the Bures-Wasserstein gradient of c/2 OT_eps(mu, mu),
by finite differences, across epsilon.

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce sinkhorn-bures --out out/sinkhorn-bures           # the full sizes
    tokenflow reproduce sinkhorn-bures --tour --out out/sinkhorn-bures    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/sinkhorn-bures``.

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
out = Path(tempfile.mkdtemp()) / "sinkhorn-bures"
subprocess.run([tokenflow_cli, "reproduce", "sinkhorn-bures", "--tour", "--out", str(out)], check=True)
figures = {entry["file"]: entry["numbers"] for entry in json.loads((out / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (sinkhorn-bures.png)
numbers = figures["sinkhorn-bures.png"]
for name in ("cases",
             "epsilons",
             "max relative gap",
             "max gap / its bound",
             "F at t = 0",
             "F at T"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/sinkhorn-bures/sinkhorn-bures.png``
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(out / "sinkhorn-bures.png"))
ax.set_axis_off()
