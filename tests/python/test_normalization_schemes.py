"""attention.normalize = pre, peri, ngpt through the Python API against numpy: the formulas of
docs/design.md section 1 transcribed independently (softmax, Q = K = V = I, scale beta)."""
import numpy as np
import pytest

import tokenflow

EPS64 = np.finfo(np.float64).eps


def softmax_gamma(x, beta):
    """sum_j softmax_j(beta <x_i, x_j>) x_j for every token (uniform weights)."""
    s = beta * x @ x.T
    w = np.exp(s - s.max(axis=1, keepdims=True))
    return (w / w.sum(axis=1, keepdims=True)) @ x


@pytest.mark.parametrize("scheme", ["sphere", "pre", "peri", "ngpt"])
def test_scheme_velocity_matches_numpy(scheme):
    rng = np.random.default_rng()
    n, d, beta = 40, 4, 1.5
    x = rng.normal(size=(n, d)) * np.exp(rng.uniform(-1, 1, size=(n, 1)))
    theta = x / np.linalg.norm(x, axis=1, keepdims=True)
    at = x if scheme in ("pre", "peri") else theta  # sphere and ngpt tokens live on the sphere
    got = tokenflow.attention_field({"attention": {"scale": beta, "normalize": scheme, "summation": "dense"}}, at)
    if scheme in ("pre", "peri"):
        g = softmax_gamma(theta, beta)
        want = g if scheme == "pre" else g / np.linalg.norm(g, axis=1, keepdims=True)
    else:
        g = softmax_gamma(theta, beta)
        want = g - np.sum(g * theta, axis=1, keepdims=True) * theta
        if scheme == "ngpt":
            want /= np.linalg.norm(g, axis=1, keepdims=True)
    # Two float64 evaluations of n-term sums of unit vectors with weights <= 1 (logits up to beta,
    # inputs normalized once more by the library): each within (n + d) (1 + beta) eps, times 16 for
    # the constants; peri and ngpt divide by |g|, which amplifies it by 1 / |g| (|g| <= 1).
    g_min = min(1.0, np.linalg.norm(softmax_gamma(theta, beta), axis=1).min())
    assert np.max(np.abs(got - want)) <= 16 * (n + d) * (1 + beta) * EPS64 / g_min


def test_unknown_scheme_names_the_key():
    with pytest.raises(Exception, match="attention.normalize"):
        tokenflow.attention_field({"attention": {"normalize": "post"}}, np.eye(3))
