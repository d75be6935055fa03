"""
A coupling system of your own, from files
=========================================

The Sinkhorn Transformer learns any coupling system given as pairs of measures with target
couplings. Here the system is one the model has never seen: y is x turned by a fixed rotation R
(unknown to the model) plus noise, shuffled, with some of x's tokens dropped from y. A token whose
copy was dropped has no partner, so the target is a partial coupling: each kept token is linked
to its copy with mass 1/n, a token without a copy spreads its 1/n over all of y. The pairs are
written as a dataset folder (``tokenflow.tasks.save``: train/*.npz, test/*.npz), and the model is
trained from the files (``[task] kind = "dataset"``), exactly as ``tokenflow train`` would. Test
accuracy counts the linked tokens whose strongest plan entry is their copy.
"""
import sys
import tempfile
from pathlib import Path

import numpy as np
import tokenflow
import tokenflow.tasks

d, noise = 3, 0.05
rng = np.random.default_rng(2026)
R = np.linalg.qr(rng.normal(size=(d, d)))[0]  # the fixed, unknown rotation


def rotated_pair(rng):
    n = int(rng.integers(6, 13))
    x = rng.normal(size=(n, d))
    kept = np.sort(rng.choice(n, size=n - int(rng.integers(0, n // 4 + 1)), replace=False))
    order = rng.permutation(len(kept))  # the shuffle: y_j is the copy of x_{kept[order[j]]}
    y = x[kept[order]] @ R.T + noise * rng.normal(size=(len(kept), d))
    target = np.zeros((n, len(kept)))
    target[kept[order], np.arange(len(kept))] = 1.0 / n
    target[np.setdiff1d(np.arange(n), kept)] = 1.0 / (n * len(kept))  # no partner: spread
    return tokenflow.tasks.TaskPair(x, y, target=target)


folder = Path(tempfile.mkdtemp()) / "rotation"
tokenflow.tasks.save(folder, [rotated_pair(rng) for _ in range(2000)], [rotated_pair(rng) for _ in range(100)])

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 400
result = tokenflow.train({"task": {"kind": "dataset", "path": str(folder)},
                          "model": {"width": 32, "layers": 2, "heads": 4, "k": 16},
                          "train": {"steps": steps, "batch": 16, "lr": 3e-3}}, progress=False)
s = result.summary
print(f"{s['test_pairs']} test pairs after {s['steps']} steps ({s['train_seconds']:.1f} s):")
print(f"  test W_1   trained {s['test_w1']:.4f}   untrained {s['test_w1_untrained']:.4f}   "
      f"independent coupling {s['test_w1_independent']:.4f}")
print(f"  accuracy   trained {s['test_accuracy']:.3f}   untrained {s['test_accuracy_untrained']:.3f}   "
      f"independent coupling {s['test_accuracy_independent']:.3f}")
