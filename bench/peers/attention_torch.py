#!/usr/bin/python3
"""The NumPy script's model (attention_numpy.py) with PyTorch (Debian's python3-torch), as a
researcher would write it: torch.softmax over the n x n logits, no autograd. Debian's build starts
with one thread; like a researcher who checked, we give it every core (torch.set_num_threads)."""
import argparse
import os

import numpy as np
import torch


def velocity(x, Q, K, V, W, scale):
    q, k, v = x @ Q.T, x @ K.T, x @ V.T
    w = torch.softmax(scale * (q @ k.T), dim=1)  # n x n
    return (w @ v) @ W.T


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--x0", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--dt", type=float, default=0.01)
    p.add_argument("--dtype", choices=["f32", "f64"], default="f64")
    p.add_argument("--K", help="the key matrix (d x d, .npy); default: K = Q = I")
    a = p.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    dtype = torch.float32 if a.dtype == "f32" else torch.float64
    with torch.no_grad():
        x = torch.from_numpy(np.load(a.x0)).to(dtype)
        d = x.shape[1]
        Q = V = W = torch.eye(d, dtype=dtype)
        K = torch.from_numpy(np.load(a.K)).to(dtype) if a.K else Q
        scale = 1.0 / d ** 0.5
        for _ in range(a.steps):
            x = x + a.dt * velocity(x, Q, K, V, W, scale)
    np.save(a.out, x.numpy())


if __name__ == "__main__":
    main()
