"""The body every reproduction example of the gallery shares (not an example itself: the gallery
skips files whose name starts with "_"): ``show(name)`` runs ``tokenflow reproduce NAME --quick``
into a temporary folder, prints the line ``reproduce --list`` gives it and the scalars of its
summary.json, and shows the figures the command drew."""
import json
import os
import subprocess
import tempfile
from pathlib import Path

import matplotlib.image as mpimg
import matplotlib.pyplot as plt


def show(name):
    cli = os.environ.get("TOKENFLOW_CLI", "tokenflow")
    listing = subprocess.run([cli, "reproduce", "--list"], check=True, capture_output=True, text=True).stdout
    print(next(line for line in listing.splitlines() if line.split()[0] == name))

    out = Path(tempfile.mkdtemp()) / name
    subprocess.run([cli, "reproduce", name, "--quick", "--out", str(out)], check=True)
    summary = json.loads((out / "summary.json").read_text())
    print({k: v for k, v in summary.items() if isinstance(v, (int, float, str, bool)) and k != "wall_seconds"})

    # The figures the command drew (out/NAME/*.png).
    for png in sorted(out.glob("*.png")):
        fig, ax = plt.subplots(figsize=(9, 6))
        ax.imshow(mpimg.imread(png))
        ax.set_axis_off()
    return summary
