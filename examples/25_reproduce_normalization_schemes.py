"""
Reproduction: Normalization schemes as speed regulation
=======================================================

``tokenflow reproduce normalization-schemes --quick``: the data and the figure of this
reproduction at the small sizes of ``--quick`` (seconds; the figure says so in red). ``--tour``
gives the sizes of ``tokenflow demo`` and no flag the full ones. ``tokenflow reproduce --list``
describes it as:
"""
import sys
from pathlib import Path

# This folder (the gallery runs each example in it, without __file__).
sys.path.insert(0, str(Path(globals().get("__file__", "here")).resolve().parent))
from _reproduction import show  # noqa: E402  (examples/_reproduction.py: run, print, draw)

show("normalization-schemes")
