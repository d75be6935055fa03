"""
Reproduction: Universal approximation by Sinkhorn Transformers
==============================================================

Sinkhorn Transformers of growing width trained on entropic OT: the test W_1 to the target
couplings falls with capacity, below the independent coupling's.

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce universal-approximation --out out/universal-approximation           # the full sizes
    tokenflow reproduce universal-approximation --tour --out out/universal-approximation    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/universal-approximation``.

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
out = Path(tempfile.mkdtemp()) / "universal-approximation"
subprocess.run([tokenflow_cli, "reproduce", "universal-approximation", "--quick", "--out", str(out)], check=True)
figures = {entry["file"]: entry["numbers"] for entry in json.loads((out / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (universal-approximation.png)
numbers = figures["universal-approximation.png"]
for name in ("models",
             "W_1 smallest model",
             "W_1 largest model",
             "W_1 independent coupling",
             "falls with capacity"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/universal-approximation/universal-approximation.png``
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(out / "universal-approximation.png"))
ax.set_axis_off()
