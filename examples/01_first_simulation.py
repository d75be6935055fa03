"""
A first simulation
==================

512 tokens drawn from N(0, I) in the plane move by dx_i/dt = Gamma_mu(x_i), the velocity of
softmax self-attention (docs/design.md section 1): each token moves to the weighted average of
V x_j with weights proportional to exp(<Q x_i, K x_j>). With K = -Q of rank one, the cloud
collapses onto a line: one covariance eigenvalue goes to zero, the other does not.
"""
import tokenflow
import tokenflow.plot

r = tokenflow.simulate({"seed": 1, "init": {"n": 512},
                        "attention": {"kind": "softmax", "Q": [[1.0, 0.5], [0.0, 0.0]],
                                      "K": [[-1.0, -0.5], [0.0, 0.0]]},
                        "run": {"T": 4.0, "dt": 0.05, "save_every": 16}},
                       progress=False)
print(r)
print("covariance eigenvalues at T = 4:", r.summary["final"]["cov_eigenvalues"])

# %%
# Snapshots of the tokens on shared axes, then each token's path.
snapshots = tokenflow.plot.particles(r.trajectory, r.times)
paths = tokenflow.plot.trajectories(r.trajectory, r.times)
