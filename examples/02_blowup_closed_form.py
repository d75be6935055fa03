"""
Blow-up against the closed form
===============================

For softmax attention with V = I, a Gaussian measure N(m, S) stays Gaussian, and its covariance
follows dS/dt = S (A + A^T) S with A = Q^T K scale (the Gaussian closure, docs/gaussian.md). It
blows up at t* = 1 / lambda_max(S0^{1/2} (A + A^T) S0^{1/2}). ``tokenflow.gaussian`` integrates
the moment ODE and refines the singular time; here it is compared with the closed form.
"""
import numpy as np
import matplotlib.pyplot as plt
import tokenflow
import tokenflow.plot

S0 = np.array([[1.0, 0.3], [0.3, 0.5]])
Q = np.array([[1.0, 0.2], [0.0, 0.8]])
config = {"init": {"cov": S0.tolist()}, "attention": {"kind": "softmax", "Q": Q.tolist(), "K": Q.tolist()},
          "run": {"T": 5.0}}
g = tokenflow.gaussian(config, progress=False)

scale = 1 / np.sqrt(2)  # the default attention.scale, 1/sqrt(k) with k = 2
A = scale * Q.T @ Q
w, U = np.linalg.eigh(S0)
root = U @ np.diag(np.sqrt(w)) @ U.T
t_star = 1 / np.linalg.eigvalsh(root @ (A + A.T) @ root).max()
print(g)
print(f"blow-up time: tokenflow {g.blowup_time:.12f}, closed form {t_star:.12f}, "
      f"relative difference {abs(g.blowup_time - t_star) / t_star:.1e}")

# %%
# The covariance eigenvalues on a log scale, with the singular time marked.
fig = tokenflow.plot.covariance_eigenvalues(g.times, tokenflow.plot.eigenvalues_of(g.covs), blowup_time=t_star)
