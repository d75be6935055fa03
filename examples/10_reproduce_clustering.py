"""
Reproduction: clustering at large n
===================================

10^5 tokens uniform on the circle (Q = K = V = I, beta = 9, on the sphere) gather into a
few clusters; the fast summation evaluates the attention in O(n).

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce clustering --out out/clustering           # the full sizes
    tokenflow reproduce clustering --tour --out out/clustering    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/clustering``.

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
out = Path(tempfile.mkdtemp()) / "clustering"
subprocess.run([tokenflow_cli, "reproduce", "clustering", "--quick", "--out", str(out)], check=True)
figures = {entry["file"]: entry["numbers"] for entry in json.loads((out / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (clustering.png)
numbers = figures["clustering.png"]
for name in ("n",
             "beta",
             "T",
             "clusters at T",
             "velocity evaluations by the fast summation",
             "densely"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/clustering/clustering.png``
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(out / "clustering.png"))
ax.set_axis_off()
