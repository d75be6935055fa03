"""attention.normalize = pre, peri, ngpt, mix through the Python API against numpy: the formulas of
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


def numpy_velocity(scheme, x, beta):
    """The scheme's velocity at tokens x by docs/design.md section 1 (sphere, ngpt: x on the sphere)."""
    theta = x / np.linalg.norm(x, axis=1, keepdims=True)
    g = softmax_gamma(theta, beta)
    if scheme == "pre":
        return g
    if scheme == "peri":
        return g / np.linalg.norm(g, axis=1, keepdims=True)
    tangent = g - np.sum(g * theta, axis=1, keepdims=True) * theta
    return tangent / np.linalg.norm(g, axis=1, keepdims=True) if scheme == "ngpt" else tangent


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


def test_mix_is_post_ln_before_mix_until_and_pre_ln_after():
    """Mix-LN: the sphere's velocity at t < mix_until, Pre-LN's from mix_until on (the same bound as
    above: at t < mix_until the tokens are on the sphere, where both formulas are evaluated)."""
    rng = np.random.default_rng()
    n, d, beta = 30, 3, 2.0
    mix_until = float(rng.uniform(0.5, 2.0))
    x = rng.normal(size=(n, d))
    theta = x / np.linalg.norm(x, axis=1, keepdims=True)
    config = {"attention": {"scale": beta, "normalize": "mix", "mix_until": mix_until, "summation": "dense"}}
    g_min = min(1.0, np.linalg.norm(softmax_gamma(theta, beta), axis=1).min())
    bound = 16 * (n + d) * (1 + beta) * EPS64 / g_min
    for t, scheme, at in ((0.0, "sphere", theta), (0.5 * mix_until, "sphere", theta), (mix_until, "pre", x),
                          (3.0 * mix_until, "pre", x)):
        got = tokenflow.attention_field(config, at, t=t)
        assert np.max(np.abs(got - numpy_velocity(scheme, at, beta))) <= bound, (t, scheme)


def test_mix_needs_mix_until_and_only_mix_takes_it():
    with pytest.raises(Exception, match="attention.mix_until"):
        tokenflow.attention_field({"attention": {"normalize": "mix"}}, np.eye(3))
    with pytest.raises(Exception, match="attention.mix_until"):
        tokenflow.attention_field({"attention": {"normalize": "sphere", "mix_until": 1.0}}, np.eye(3))
