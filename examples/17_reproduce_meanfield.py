"""
Reproduction: The mean-field limit
==================================

The distance of n particles to the Gaussian closure against n, log-log: the theory predicts
the rate n^-1/2.

From a shell (``build/tokenflow`` in a checkout; ``tokenflow`` once installed)::

    tokenflow reproduce meanfield --out out/meanfield           # the full sizes
    tokenflow reproduce meanfield --tour --out out/meanfield    # the demo's sizes

It writes the data, ``summary.json``, the figure and ``figures.json`` (the numbers the figure
states) into ``out/meanfield``.

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
out = Path(tempfile.mkdtemp()) / "meanfield"
subprocess.run([tokenflow_cli, "reproduce", "meanfield", "--quick", "--out", str(out)], check=True)
figures = {entry["file"]: entry["numbers"] for entry in json.loads((out / "figures.json").read_text())}

# %%
# The numbers that matter, from figures.json (meanfield.png)
numbers = figures["meanfield.png"]
for name in ("n from",
             "n to",
             "samples per n",
             "fitted slope (from N(m0, S0))",
             "fitted slope (from the sample's moments)",
             "predicted slope"):
    value = numbers[name]
    print(f"{name:<56} {value:.6g}" if isinstance(value, float) else f"{name:<56} {value}")

# %%
# The figure the command drew, ``out/meanfield/meanfield.png``
ax = plt.figure(figsize=(9, 6)).add_subplot()
ax.imshow(mpimg.imread(out / "meanfield.png"))
ax.set_axis_off()
