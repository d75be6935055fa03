"""
Reproduction: Dynamic metastability
===================================

``tokenflow reproduce metastability --quick``: the data and the figure of this reproduction at the
small sizes of ``--quick`` (seconds; the figure says so in red). ``--tour`` gives the sizes of
``tokenflow demo`` and no flag the full ones. ``tokenflow reproduce --list`` describes it as:
"""
import json
import os
import subprocess
import tempfile
from pathlib import Path

import matplotlib.image as mpimg
import matplotlib.pyplot as plt

cli = os.environ.get("TOKENFLOW_CLI", "tokenflow")
listing = subprocess.run([cli, "reproduce", "--list"], check=True, capture_output=True, text=True).stdout
print(next(line for line in listing.splitlines() if line.split()[0] == "metastability"))

out = Path(tempfile.mkdtemp()) / "metastability"
subprocess.run([cli, "reproduce", "metastability", "--quick", "--out", str(out)], check=True)
summary = json.loads((out / "summary.json").read_text())
print({k: v for k, v in summary.items() if isinstance(v, (int, float, str, bool)) and k != "wall_seconds"})

# %%
# The figure the command drew (out/metastability/metastability*.png).
for png in sorted(out.glob("*.png")):
    fig, ax = plt.subplots(figsize=(9, 6))
    ax.imshow(mpimg.imread(png))
    ax.set_axis_off()
