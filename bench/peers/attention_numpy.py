#!/usr/bin/python3
"""Softmax attention flow, explicit Euler, written as a researcher would with NumPy: vectorized,
the n x n logits in memory. Same model as `tokenflow simulate` with its defaults (one head,
Q = K = V = W = I unless --K gives K, scale 1/sqrt(k), uniform weights):
    x <- x + dt * softmax_rows(scale (x Q^T)(x K^T)^T) (x V^T) W^T
Reads the initial points from --x0 (.npy), writes the final ones to --out (.npy)."""
import argparse

import numpy as np


def velocity(x, Q, K, V, W, scale):
    q, k, v = x @ Q.T, x @ K.T, x @ V.T
    s = scale * (q @ k.T)                       # n x n logits
    s -= s.max(axis=1, keepdims=True)
    w = np.exp(s)
    w /= w.sum(axis=1, keepdims=True)
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
    dtype = np.float32 if a.dtype == "f32" else np.float64
    x = np.load(a.x0).astype(dtype)
    d = x.shape[1]
    Q = V = W = np.eye(d, dtype=dtype)
    K = np.load(a.K).astype(dtype) if a.K else Q
    scale, dt = dtype(1.0 / np.sqrt(d)), dtype(a.dt)
    for _ in range(a.steps):
        x = x + dt * velocity(x, Q, K, V, W, scale)
    np.save(a.out, x)


if __name__ == "__main__":
    main()
