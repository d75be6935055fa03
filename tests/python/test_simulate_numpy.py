"""simulate against a few lines of numpy: Euler steps of every attention kind of the registry
(tokenflow.attention_kinds()) with random Q, K, V and weights, written directly from
docs/design.md section 1."""
import json

import numpy as np
import pytest

import tokenflow


def logsumexp(z, axis):
    top = z.max(axis=axis, keepdims=True)
    return (top + np.log(np.exp(z - top).sum(axis=axis, keepdims=True))).squeeze(axis)


def sinkhorn_weights(s, a, epsilon):
    """pi_ij / a_i, pi the entropic OT plan between (a, a) for the cost -s: pi_ij = a_i a_j
    exp((f_i + g_j + s_ij) / epsilon), alternate log-domain updates until the column sums of pi
    miss a by less than 4 n u in l1 (u = 2^-53: the rounding of n-term sums; attention.sinkhorn_tol
    is 1e-12)."""
    f, g, la = np.zeros(len(a)), np.zeros(len(a)), np.log(a)
    floor = 4 * len(a) * np.finfo(float).eps / 2
    for _ in range(100000):
        g = -epsilon * logsumexp(la[:, None] + (f[:, None] + s) / epsilon, axis=0)
        f = -epsilon * logsumexp(la[None, :] + (g[None, :] + s) / epsilon, axis=1)
        pi = np.exp(la[:, None] + la[None, :] + (f[:, None] + g[None, :] + s) / epsilon)
        if np.abs(pi.sum(0) - a).sum() < floor:
            return pi / a[:, None]
    pytest.fail("the numpy Sinkhorn reference did not converge")


def velocity(x, a, kind, Q, K, V, scale, bias=None, epsilon=1.0):
    qx, kx = x @ Q.T, x @ K.T
    s = -scale * ((qx[:, None, :] - kx[None, :, :]) ** 2).sum(-1) if kind == "l2" else scale * qx @ kx.T
    if kind in ("softmax", "l2"):
        w = np.exp(s - s.max(1, keepdims=True)) * a
        w /= w.sum(1, keepdims=True)
    elif kind == "sigmoid":
        w = a / (1 + np.exp(-(s + (-np.log(len(x)) if bias is None else bias))))
    elif kind == "linear":
        w = a * s
    elif kind == "sinkhorn":
        w = sinkhorn_weights(s, a, epsilon)
    else:
        pytest.fail(f"attention kind {kind!r} has no numpy transcription here: write it from docs/design.md")
    return w @ x @ V.T


@pytest.mark.parametrize("kind", [k["name"] for k in tokenflow.attention_kinds()])
def test_euler_steps_match_numpy(tmp_path, cli, kind):
    rng = np.random.default_rng()
    n, d, steps, dt = 50, 3, 5, 0.05
    x0 = rng.normal(size=(n, d))
    a = rng.uniform(0.5, 1.5, n)
    Q, K, V = (rng.normal(size=(d, d)) * 0.5 for _ in range(3))
    np.save(tmp_path / "x0.npy", x0)
    np.save(tmp_path / "a.npy", a)
    mat = lambda m: "[" + ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in m) + "]"
    (tmp_path / "cfg.toml").write_text(
        f'[init]\nkind = "file"\npath = "x0.npy"\nweights = "a.npy"\n'
        f'[attention]\nkind = "{kind}"\nQ = {mat(Q)}\nK = {mat(K)}\nV = {mat(V)}\n'
        f'[run]\nT = {steps * dt}\ndt = {dt}\nintegrator = "euler"\n')
    cli("simulate", "--config", tmp_path / "cfg.toml", "--out", tmp_path / "out")
    x, w = x0.copy(), a / a.sum()
    for _ in range(steps):
        x = x + dt * velocity(x, w, kind, Q, K, V, 1 / np.sqrt(d))
    got = np.load(tmp_path / "out" / "positions.npy")
    # 5 steps of sums over 50 terms in float64: relative error ~ 1e-15; 1e-12 is a wide bound.
    # Sinkhorn's weights are iterates stopped at l1 marginal error 1e-12 (tokenflow) and 2.2e-14
    # (here): each row of pi / a_i is then within 1e-12 / a_i ~ 1e-12 n of the fixed point's, times
    # the iteration's contraction factor 1 / (1 - kappa) (Birkhoff: kappa = tanh(range(s) / 4
    # epsilon)^2, about 0.97 for these logits' range < 10): 5e-9 relative bounds it.
    tol = 5e-9 if kind == "sinkhorn" else 1e-12
    assert np.abs(got - x).max() <= tol * np.abs(x).max()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == steps
    assert np.allclose(summary["final"]["mean"], (w[:, None] * got).sum(0), rtol=1e-12, atol=1e-14)


def test_bad_input_exits_2_and_writes_nothing(tmp_path, cli):
    r = cli("simulate", "--set", "init.cov=[[1.0, 2.0], [2.0, 1.0]]", "--out", tmp_path / "out", check=False)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "init.cov" in r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("sphere_step", ["projected", "retraction"])
def test_sphere_steps_match_numpy(tmp_path, cli, sphere_step):
    # On the sphere: "projected" steps with the tangent velocity P_x Gamma = Gamma - <Gamma, x> x,
    # "retraction" with the raw Gamma (Geshkovski et al.'s update x <- normalize(x + dt Gamma));
    # both normalize after each Euler step (docs/design.md section 1, run.sphere_step).
    rng = np.random.default_rng()
    n, d, steps, dt, beta = 40, 3, 5, 0.1, 2.0
    x0 = rng.normal(size=(n, d))
    x0 /= np.linalg.norm(x0, axis=1, keepdims=True)
    np.save(tmp_path / "x0.npy", x0)
    (tmp_path / "cfg.toml").write_text(
        f'[init]\nkind = "file"\npath = "x0.npy"\n'
        f'[attention]\nnormalize = "sphere"\nscale = {beta}\n'
        f'[run]\nT = {steps * dt}\ndt = {dt}\nintegrator = "euler"\nsphere_step = "{sphere_step}"\n')
    cli("simulate", "--config", tmp_path / "cfg.toml", "--out", tmp_path / "out")
    x, w, eye = x0.copy(), np.full(n, 1.0 / n), np.eye(d)
    for _ in range(steps):
        v = velocity(x, w, "softmax", eye, eye, eye, beta)
        if sphere_step == "projected":
            v = v - (v * x).sum(1, keepdims=True) * x
        x = x + dt * v
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    got = np.load(tmp_path / "out" / "positions.npy")
    # Per step: 40-term sums of terms below 1 (|x| = 1, weights summing to 1) and one
    # normalization, each within ~40 u = 9e-15 of the exact value in both codes; the step map has
    # Lipschitz constant at most 1 + dt (1 + 2 beta) = 1.5, so 5 steps stay below
    # 5 x 1.5^5 x 2 x 9e-15 = 7e-13 < 1e-12.
    assert np.abs(got - x).max() <= 1e-12
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["sphere_step"] == sphere_step
