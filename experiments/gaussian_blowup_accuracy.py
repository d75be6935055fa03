#!/usr/bin/python3
"""Blow-up time of `tokenflow gaussian` (softmax, V = W = I) against the closed form
t* = 1 / lambda_max(S0^{1/2} (A + A^T) S0^{1/2}) on random cases.
Usage, from the repository root after building:  experiments/gaussian_blowup_accuracy.py [cases] [d] [blowup]"""
import json, os, subprocess, sys, tempfile
import numpy as np

cases = int(sys.argv[1]) if len(sys.argv) > 1 else 100
d = int(sys.argv[2]) if len(sys.argv) > 2 else 3
blowup = float(sys.argv[3]) if len(sys.argv) > 3 else 1e8
rng = np.random.default_rng(12345)
cli = os.path.join(os.getcwd(), "build", "tokenflow")

def toml(M):
    return "[" + ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in np.atleast_2d(M)) + "]"

errors = []
work = tempfile.mkdtemp(prefix="tf-blowup-")
while len(errors) < cases:
    Q, K = rng.normal(size=(d, d)), rng.normal(size=(d, d))
    G = rng.normal(size=(d, d)); S0 = 0.3 * G @ G.T + 0.2 * np.eye(d)
    A = K.T @ Q / np.sqrt(d)
    w, U = np.linalg.eigh(S0); R = U @ np.diag(np.sqrt(w)) @ U.T
    lam = np.linalg.eigvalsh(R @ (A + A.T) @ R).max()
    if lam <= 1e-3: continue
    tstar = 1 / lam
    cfg = os.path.join(work, "cfg.toml")
    with open(cfg, "w") as f:
        f.write(f"[init]\nmean = {toml(rng.normal(size=(1, d)) * 0.3)[1:-1]}\ncov = {toml(S0)}\n"
                f"[attention]\nQ = {toml(Q)}\nK = {toml(K)}\n[run]\nT = {2 * tstar!r}\nblowup = {blowup!r}\n")
    out = os.path.join(work, f"out{len(errors)}")
    subprocess.run([cli, "gaussian", "--config", cfg, "--out", out], check=True, capture_output=True)
    s = json.load(open(os.path.join(out, "summary.json")))
    assert s["status"] == "blowup", s["status"]
    errors.append(abs(s["blowup_time"] - tstar) / tstar)
errors = np.array(errors)
print(f"{cases} random cases, d = {d}, blowup = {blowup:g}: relative error of blowup_time: "
      f"median {np.median(errors):.2e}, max {errors.max():.2e}")
