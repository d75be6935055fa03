"""
Energies, stability and coupling tasks
======================================

Three smaller parts of the Python API:

- ``interaction_energy``, ``metric_slope`` and ``energy_rate``: the interaction energy
  ``E = 1/2 sum_ij a_i a_j exp(s_ij)`` of softmax attention (``s_ij = x_j^T A x_i``), its metric
  slope ``|dE|`` and its rate ``dE/dt`` along the flow (docs/gradient-flow.md). With A symmetric
  and ``V = c A`` (c > 0) the flow is a gradient flow and ``dE/dt = |dE|^2``; with ``V = R A``
  (R a rotation by 90 degrees) ``dE/dt = 0`` while ``|dE| > 0``.
- ``stability``: ``W_2(mu_t, nu_t) / W_2(mu_0, nu_0)`` for two nearby initial measures (exact OT).
- ``tokenflow.tasks``: the coupling tasks a Sinkhorn Transformer learns, sampled.
"""
import numpy as np
import tokenflow
import tokenflow.tasks

x = np.random.default_rng(0).normal(size=(300, 2))
flow = {"attention": {"kind": "softmax", "Q": [[1.0, 0.0], [0.0, 0.5]], "K": [[1.0, 0.0], [0.0, 0.5]],
                      "V": [[1.0, 0.0], [0.0, 0.25]]}}
E = tokenflow.interaction_energy(flow, x)
slope = tokenflow.metric_slope(flow, x)
rate = tokenflow.energy_rate(flow, x)
print(f"V = c A:  E = {E:.6f}, |dE|^2 = {slope ** 2:.10f}, dE/dt = {rate:.10f}")
rotated = {"attention": dict(flow["attention"], V=[[0.0, -0.25], [1.0, 0.0]])}  # R A, up to c
print(f"V = R A:  |dE|^2 = {tokenflow.metric_slope(rotated, x) ** 2:.6f}, "
      f"dE/dt = {tokenflow.energy_rate(rotated, x):.1e}")

st = tokenflow.stability({"init": {"n": 64}, "run": {"T": 0.5}}, progress=False)
print(st)

pairs = tokenflow.tasks.sample({"task": {"kind": "matching", "n": 4}}, count=2, seed=1)
print(tokenflow.tasks.describe({"task": {"kind": "matching", "n": 4}}))
print(pairs[0])

# %%
# The stability study's ratio W_2(mu_t, nu_t) / W_2(mu_0, nu_0) along the flow (stability.csv).
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(st.table["t"], st.table["ratio"], marker="o")
ax.set_xlabel("t")
ax.set_ylabel("W_2(mu_t, nu_t) / W_2(mu_0, nu_0)")
