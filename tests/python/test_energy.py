"""interaction_energy, metric_slope and energy_rate against a numpy double loop of the formulas
of docs/gradient-flow.md, on fresh random inputs."""
import numpy as np
import pytest

import tokenflow

U = np.finfo(float).eps / 2  # unit roundoff


def reference(x, a, Q, K, V, W, scale):
    """E, dE/dt and |dE|^2 by plain loops: s_ij = x_j^T A x_i, A = scale K^T Q, C = W V,
    grad_i E = 1/2 a_i sum_j a_j (exp(s_ij) A^T x_j + exp(s_ji) A x_j), Gamma_i = C ybar_i,
    |dE|^2 = c sum_i |grad_i E|^2 / (a_i Z_i), c = |C|_F / |A|_F. Also the same sums with every
    term in absolute value (the scale of their rounding)."""
    A, C = scale * K.T @ Q, W @ V
    n, d = x.shape
    c = np.linalg.norm(C) / np.linalg.norm(A)
    a_norm = max(np.abs(A).sum(axis=1).max(), np.abs(A).sum(axis=0).max())
    energy = rate = slope2 = rate_size = slope_size = 0.0
    for i in range(n):
        grad, ybar, size, Z = np.zeros(d), np.zeros(d), np.zeros(d), 0.0
        for j in range(n):
            e_ij, e_ji = np.exp(x[j] @ A @ x[i]), np.exp(x[i] @ A @ x[j])
            energy += 0.5 * a[i] * a[j] * e_ij
            Z += a[j] * e_ij
            ybar += a[j] * e_ij * x[j]
            grad += 0.5 * a[i] * a[j] * (e_ij * A.T @ x[j] + e_ji * A @ x[j])
            size += 0.5 * a[i] * a[j] * (e_ij + e_ji) * a_norm * np.abs(x[j]).max()
        ybar /= Z
        rate += grad @ (C @ ybar)
        rate_size += size @ (np.abs(C) @ np.abs(ybar))
        slope2 += c * grad @ grad / (a[i] * Z)
        slope_size += c * size @ size / (a[i] * Z)
    return energy, rate, slope2, rate_size, slope_size


def config_of(Q, K, V, W, scale):
    return {"attention": {"kind": "softmax", "Q": Q, "K": K, "V": V, "W": W, "scale": scale}}


@pytest.mark.parametrize("d", [2, 3, 4])
def test_rates_match_a_double_loop(d):
    rng = np.random.default_rng()
    n = int(rng.integers(5, 30))
    x = rng.normal(size=(n, d))
    a = rng.uniform(0.5, 1.5, size=n)
    a /= a.sum()
    Q, K, V, W = (rng.normal(scale=0.5, size=(d, d)) for _ in range(4))
    scale = float(rng.uniform(0.3, 1.5))
    config = config_of(Q, K, V, W, scale)
    E, rate, slope2, rate_size, slope_size = reference(x, a, Q, K, V, W, scale)
    # Tolerance (tests/cpp/test_energy.cpp derives it): logits formed in other orders differ by
    # <= (2 d^2 + 4 d) u |A|_max R^2, sums of n terms by n u each side, products and dots 3 d u;
    # relative to the sum of absolute values; rate and slope are products of two such terms (x 2).
    A = scale * K.T @ Q
    R = np.linalg.norm(x, axis=1).max()
    rel = U * ((2 * d * d + 4 * d) * np.abs(A).max() * R * R + 2 * n + 6 * d + 10)
    assert abs(tokenflow.interaction_energy(config, x, a) - E) <= rel * E
    assert abs(tokenflow.energy_rate(config, x, a) - rate) <= 2 * rel * rate_size
    assert abs(tokenflow.metric_slope(config, x, a) ** 2 - slope2) <= 2 * rel * slope_size + 4 * U * slope2


def test_slope_squared_is_the_rate_under_the_structure():
    rng = np.random.default_rng()
    d, n = 3, 25
    G = rng.normal(size=(d, d))
    A = 0.3 * (G + G.T)
    x = rng.normal(size=(n, d))
    I = np.eye(d)
    c = float(rng.uniform(0.5, 2.0))
    inside = config_of(I, A, c * A, I, 1.0)  # A symmetric, C = c A: a gradient flow
    _, _, _, rate_size, slope_size = reference(x, np.full(n, 1 / n), I, A, c * A, I, 1.0)
    R = np.linalg.norm(x, axis=1).max()
    tol = 4 * U * ((2 * d * d + 4 * d) * np.abs(A).max() * R * R + 2 * n + 6 * d + 10) * (rate_size + slope_size)
    assert abs(tokenflow.energy_rate(inside, x) - tokenflow.metric_slope(inside, x) ** 2) <= tol
    outside = config_of(I, A, -c * A, I, 1.0)  # C = -c A: dE/dt = -|dE|^2
    assert abs(tokenflow.energy_rate(outside, x) + tokenflow.metric_slope(outside, x) ** 2) <= tol


def test_bad_input_names_the_key():
    x = np.ones((3, 2))
    with pytest.raises(tokenflow.InputError, match="attention.kind"):
        tokenflow.interaction_energy({"attention": {"kind": "l2"}}, x)
    with pytest.raises(tokenflow.InputError, match="attention.heads"):
        I = np.eye(2)  # two heads of k = kv = 1 in d = 2
        tokenflow.metric_slope({"attention": {"heads": 2, "Q": I, "K": I, "V": I, "W": I}}, x)
