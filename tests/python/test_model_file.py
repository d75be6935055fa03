"""model.bin is readable without tokenflow: numpy reads it (python/tokenflow/model_file.py) and an
independent numpy forward pass of the Sinkhorn Transformer gives the plan `tokenflow couple` writes."""
import importlib.util
import json
import math
import os
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("TOKENFLOW_CLI", os.path.join(ROOT, "build", "tokenflow"))
spec = importlib.util.spec_from_file_location("model_file", os.path.join(ROOT, "python", "tokenflow", "model_file.py"))
model_file = importlib.util.module_from_spec(spec)
spec.loader.exec_module(model_file)

pytestmark = pytest.mark.skipif(not os.path.exists(CLI), reason="the CLI is not built")


def layernorm(h, w, b):
    mu = h.mean(axis=1, keepdims=True)
    var = ((h - mu) ** 2).mean(axis=1, keepdims=True)
    return (h - mu) / np.sqrt(var + 1e-5) * w + b


def encoder(t, prefix, x, log_a, layers, heads):
    h = x @ t[prefix + "embed.weight"].T + t[prefix + "embed.bias"]
    n, C = h.shape
    hs = C // heads
    for l in range(layers):
        p = f"{prefix}blocks.{l}."
        qkv = layernorm(h, t[p + "ln1.weight"], t[p + "ln1.bias"]) @ t[p + "qkv.weight"].T + t[p + "qkv.bias"]
        y = np.zeros((n, C))
        for k in range(heads):
            q, kk, v = (qkv[:, j * C + k * hs: j * C + (k + 1) * hs] for j in range(3))
            s = q @ kk.T / math.sqrt(hs) + log_a[None, :]
            w = np.exp(s - s.max(axis=1, keepdims=True))
            y[:, k * hs:(k + 1) * hs] = (w / w.sum(axis=1, keepdims=True)) @ v
        h = h + y @ t[p + "proj.weight"].T + t[p + "proj.bias"]
        f = layernorm(h, t[p + "ln2.weight"], t[p + "ln2.bias"]) @ t[p + "fc.weight"].T + t[p + "fc.bias"]
        f = 0.5 * f * (1 + np.tanh(math.sqrt(2 / math.pi) * (f + 0.044715 * f ** 3)))
        h = h + f @ t[p + "fc_proj.weight"].T + t[p + "fc_proj.bias"]
    return layernorm(h, t[prefix + "ln_f.weight"], t[prefix + "ln_f.bias"]) @ t[prefix + "out.weight"].T


def logsumexp(z, axis):
    m = z.max(axis=axis, keepdims=True)
    return (m + np.log(np.exp(z - m).sum(axis=axis, keepdims=True))).squeeze(axis)


def numpy_plan(config, t, x, y, converged=False):
    def key(name):
        line = next(l for l in config.split("[model]")[1].splitlines() if l.startswith(name + " ="))
        return line.split("=")[1].strip()

    layers, heads, k = int(key("layers")), int(key("heads")), int(key("k"))
    eps, iters = float(key("epsilon")), int(key("sinkhorn_iters"))
    la = np.full(len(x), -math.log(len(x)))
    lb = np.full(len(y), -math.log(len(y)))
    Q = encoder(t, "q_encoder.", x, la, layers, heads)
    K = encoder(t, "k_encoder.", y, lb, layers, heads)
    S = (Q @ K.T) / math.sqrt(k) / eps
    u, v = np.zeros(len(x)), np.zeros(len(y))
    # Unrolled: the model's sinkhorn_iters iterations. Converged: the same iteration until the rows
    # are within 1e-14 (l1) of the weights, the fixed point tokenflow couple returns by default.
    for it in range(100000 if converged else iters):
        u = -logsumexp(lb[None, :] + v[None, :] + S, axis=1)
        v = -logsumexp(la[:, None] + u[:, None] + S, axis=0)
        if converged:
            P = np.exp(la[:, None] + lb[None, :] + u[:, None] + v[None, :] + S)
            if np.abs(P.sum(axis=1) - np.exp(la)).sum() < 1e-14:
                break
    return np.exp(la[:, None] + lb[None, :] + u[:, None] + v[None, :] + S)


def test_numpy_reads_model_bin_and_reproduces_couple(tmp_path):
    run = tmp_path / "run"
    subprocess.run([CLI, "train", "--set", "task.n=5", "--set", "model.width=8", "--set", "model.heads=2",
                    "--set", "model.k=4", "--set", "model.sinkhorn_iters=7", "--set", "train.steps=3",
                    "--set", "train.batch=4", "--set", "train.test_pairs=4", "--out", str(run)],
                   check=True, env=dict(os.environ, CI="1"))
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(4, 2)), rng.normal(size=(6, 2))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    for name, extra in [("unrolled", ["--unrolled"]), ("converged", ["--tol", "1e-13"])]:
        subprocess.run([CLI, "couple", "--model", str(run / "model.bin"), "--x", str(tmp_path / "x.npy"),
                        "--y", str(tmp_path / "y.npy"), *extra, "--out", str(tmp_path / name)], check=True,
                       env=dict(os.environ, CI="1"))
    config, tensors = model_file.read_model(run / "model.bin")
    assert "[model]" in config and "[task]" in config
    assert list(tensors)[0] == "q_encoder.embed.weight" and tensors["q_encoder.embed.weight"].shape == (8, 2)
    plan = np.load(tmp_path / "unrolled" / "plan.npy")
    # Two float64 evaluations of the same formulas in different orders: ~ (path length) x 2^-53.
    np.testing.assert_allclose(numpy_plan(config, tensors, x, y), plan, rtol=0, atol=1e-12)
    np.testing.assert_allclose(plan.sum(axis=0), 1 / 6, atol=1e-15)
    # The default: the fixed point. Both plans are within 1e-13 (l1 rows) of it; a plan entry moves
    # by at most its own size times the log-ratio of the marginals it is exact for (Birkhoff-Hopf,
    # docs/ot.md), here below 1e-12 for plans of 24 entries of size ~ 1/24.
    converged = np.load(tmp_path / "converged" / "plan.npy")
    np.testing.assert_allclose(numpy_plan(config, tensors, x, y, converged=True), converged, rtol=0, atol=1e-12)
    assert np.abs(converged.sum(axis=1) - 1 / 4).sum() < 1e-13
    summary = json.loads((tmp_path / "converged" / "summary.json").read_text())
    assert summary["plan_kind"] == "converged" and summary["converged"] and summary["marginal_error"] < 1e-13
    assert json.loads((tmp_path / "unrolled" / "summary.json").read_text())["plan_kind"] == "unrolled"


def test_a_damaged_model_file_is_refused(tmp_path):
    run = tmp_path / "run"
    subprocess.run([CLI, "train", "--set", "task.n=4", "--set", "model.width=4", "--set", "model.heads=1",
                    "--set", "model.k=2", "--set", "model.layers=1", "--set", "train.steps=1", "--set",
                    "train.batch=2", "--set", "train.test_pairs=2", "--out", str(run)], check=True,
                   env=dict(os.environ, CI="1"))
    data = bytearray((run / "model.bin").read_bytes())
    data[len(data) // 2] ^= 1
    (tmp_path / "bad.bin").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum"):
        model_file.read_model(tmp_path / "bad.bin")
