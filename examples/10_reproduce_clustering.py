"""
Reproduction: clustering at large n
===================================

``tokenflow reproduce clustering`` follows 10^5 tokens on the circle (Q = K = V = I, scale
beta = 9, ``normalize = "sphere"``) through the fast summation until they gather into a few
clusters. Its ``--quick`` size (2000 tokens, 200 rk4 steps) takes about half a minute; this page
runs the same config through the Python API at n = 500, where it takes seconds, and counts the
clusters per frame (summary.json's diagnostics).
"""
import matplotlib.pyplot as plt
import numpy as np
import tokenflow

config = {"seed": 7, "init": {"kind": "sphere", "n": 500, "d": 2},
          "attention": {"kind": "softmax", "Q": np.eye(2).tolist(), "K": np.eye(2).tolist(),
                        "V": np.eye(2).tolist(), "scale": 9.0, "normalize": "sphere"},
          "run": {"T": 20.0, "dt": 0.1, "integrator": "rk4", "save_every": 10}}
r = tokenflow.simulate(config, progress=False)
print(r)
print("clusters per frame:", r.diagnostics["clusters"].astype(int).tolist())

# %%
# The angles of the tokens against time: from uniform on the circle to a few clusters.
angles = np.arctan2(r.trajectory[..., 1], r.trajectory[..., 0])
fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(r.times, angles, ",", color="C0")
ax.set_xlabel("t")
ax.set_ylabel("angle of x_i")
