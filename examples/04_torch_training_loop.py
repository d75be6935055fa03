"""
A training loop with tokenflow.torch
====================================

``tokenflow.torch.sinkhorn_divergence`` is a differentiable torch operation (implicit gradients
of the converged Sinkhorn fixed point, no unrolling). Here it is the loss of a small torch
training loop: 64 points learn to match a target cloud by gradient descent on S_eps.
This example needs PyTorch (Debian: python3-torch); the site skips it where torch is missing.
"""
import torch
import matplotlib.pyplot as plt
import tokenflow.torch as tt

torch.manual_seed(0)
target = torch.randn(80, 2, dtype=torch.float64) * 0.3 + torch.tensor([1.5, 1.0], dtype=torch.float64)
points = torch.randn(64, 2, dtype=torch.float64).requires_grad_(True)
start = points.detach().clone()
optimizer = torch.optim.Adam([points], lr=0.05)
losses = []
for step in range(60):
    optimizer.zero_grad()
    loss = tt.sinkhorn_divergence(points, target, epsilon=0.1)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print(f"S_eps: {losses[0]:.4f} at step 0, {losses[-1]:.2e} at step {len(losses) - 1}")

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(9, 4))
left.semilogy(losses)
left.set_xlabel("step")
left.set_ylabel("Sinkhorn divergence")
right.scatter(*start.T, s=8, label="start")
right.scatter(*target.T, s=8, label="target")
right.scatter(*points.detach().T, s=8, label="after 60 steps")
right.legend()
