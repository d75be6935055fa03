"""
A million tokens
================

Softmax attention whose heads have key dimension k <= 3 is a Gauss transform: with
``attention.summation = "fast"`` (or the default ``"auto"``, where it is predicted faster),
tokenflow evaluates it in O(n) on a Taylor grid with a per-token error certificate
(docs/fast-summation.md). One Euler step of 10^6 tokens in the plane, where the dense n x n
sum would take about half an hour on two cores.
"""
import time

import matplotlib.pyplot as plt
import numpy as np
import tokenflow

start = time.perf_counter()
r = tokenflow.simulate({"seed": 3, "init": {"n": 1_000_000, "d": 2},
                        "attention": {"kind": "softmax", "summation": "fast"},
                        "run": {"T": 0.1, "dt": 0.1, "integrator": "euler", "save_every": 0}},
                       progress=False)
print(f"{r.positions.shape[0]:,} tokens, one Euler step in {time.perf_counter() - start:.1f} s")
print("summation:", r.summary["summation"])
moved = np.linalg.norm(r.positions - r.initial, axis=1)

# %%
# How far each token moved in the step, against its distance from the origin (a sample).
fig, ax = plt.subplots(figsize=(6, 4))
pick = np.random.default_rng(0).choice(len(moved), 20_000, replace=False)
ax.scatter(np.linalg.norm(r.initial[pick], axis=1), moved[pick], s=1)
ax.set_xlabel("|x_i| at t = 0")
ax.set_ylabel("|x_i(0.1) - x_i(0)|")
