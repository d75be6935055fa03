"""
Optimal transport against POT
=============================

Entropic optimal transport between two point clouds with ``tokenflow.sinkhorn`` (log-domain
Sinkhorn), the same problem with POT's ``ot.sinkhorn``, and exact OT (network simplex) with both.
The plans are couplings of a and b; the entropic cost lies above the exact one.
"""
import numpy as np
import matplotlib.pyplot as plt
import ot
import tokenflow

rng = np.random.default_rng(0)
x = rng.normal(size=(200, 2))
y = rng.normal(size=(150, 2)) + np.array([2.0, 0.5])
a, b = np.full(200, 1 / 200), np.full(150, 1 / 150)
M = ot.dist(x, y)  # squared Euclidean costs

mine = tokenflow.sinkhorn(x, y, epsilon=0.5)
theirs = ot.sinkhorn(a, b, M, reg=0.5, stopThr=1e-12, numItermax=100000)
print(mine)
print(f"plans differ by at most {np.abs(mine.plan - theirs).max():.1e} (entries about {1 / (200 * 150):.1e})")
print(f"entropic <C, pi>: tokenflow {mine.cost:.10f}, POT {(theirs * M).sum():.10f}")
exact = tokenflow.exact_ot(x, y)
print(f"exact OT: tokenflow {exact.cost:.10f}, POT emd2 {ot.emd2(a, b, M):.10f}")

# %%
# The entropic plan: each x_i is linked to the y_j it sends mass to (the heaviest links drawn).
fig, ax = plt.subplots(figsize=(6, 4.5))
i, j = np.unravel_index(np.argsort(mine.plan, axis=None)[-300:], mine.plan.shape)
for p, q in zip(i, j):
    ax.plot([x[p, 0], y[q, 0]], [x[p, 1], y[q, 1]], color="0.7", lw=0.5)
ax.scatter(*x.T, s=8, label="x")
ax.scatter(*y.T, s=8, label="y")
ax.legend()
ax.set_title("300 heaviest links of the Sinkhorn plan (epsilon = 0.5)")
