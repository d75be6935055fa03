"""
Texts as measures and their coupling
====================================

``tokenflow embed`` turns a text into a measure: one point per distinct known word (its word
vector), weighted by the word's count. Two texts are then two measures, and their entropic OT
plan couples words of one with words of the other. The word vectors here are a tiny hand-made
file in the word2vec text format (a real run would use GloVe or word2vec vectors).
"""
import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import matplotlib.pyplot as plt
import tokenflow
import tokenflow.plot

cli = os.environ.get("TOKENFLOW_CLI", "tokenflow")
work = Path(tempfile.mkdtemp())
vectors = {"cat": [1.0, 0.1, 0.0], "dog": [0.9, 0.2, 0.1], "kitten": [1.0, 0.0, 0.1],
           "puppy": [0.9, 0.3, 0.0], "sat": [0.0, 1.0, 0.1], "lay": [0.1, 0.9, 0.0],
           "mat": [0.0, 0.1, 1.0], "rug": [0.1, 0.0, 0.9], "the": [0.3, 0.3, 0.3], "on": [0.2, 0.4, 0.3]}
(work / "vectors.txt").write_text(f"{len(vectors)} 3\n" + "".join(
    w + " " + " ".join(map(str, v)) + "\n" for w, v in vectors.items()))

texts = {"x": "The cat sat on the mat", "y": "A puppy lay on the rug"}
measures = {}
for name, text in texts.items():
    subprocess.run([cli, "embed", "--vectors", str(work / "vectors.txt"), "--text", text,
                    "--out", str(work / name)], check=True)
    d = work / name
    measures[name] = (np.load(d / "points.npy"), np.load(d / "weights.npy"), (d / "words.txt").read_text().split())
    print(name, json.loads((d / "summary.json").read_text()))

(x, a, wx), (y, b, wy) = measures["x"], measures["y"]
plan = tokenflow.sinkhorn(x, y, a, b, epsilon=0.05).plan
for i, w in enumerate(wx):
    print(f"{w:>5} -> {wy[int(plan[i].argmax())]}")

# %%
# The plan: rows are the words of the first text, columns those of the second.
fig, ax = plt.subplots(figsize=(5, 4))
ax.imshow(plan, cmap="viridis")
ax.set_xticks(range(len(wy)), wy)
ax.set_yticks(range(len(wx)), wx)
ax.set_title("entropic OT plan between two texts")
