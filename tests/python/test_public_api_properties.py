"""Property-based tests of the whole public Python API (tokenflow, tokenflow.tasks, tokenflow.torch,
tokenflow.pot) with Hypothesis: one battery of drawn inputs against every public function.

The property, stated once (`check_call`): a call returns a finite, valid result (shapes, marginals,
masses: each function's validator below), or raises tokenflow.InputError naming one of the
arguments that was drawn bad (or, for a function that documents it, the documented error). The
oracle is computed from the drawn values themselves (`classify`): an argument is
- "good": a valid value in any accepted form (float16/32/64 or integer dtypes, lists, Fortran order,
  strided views, torch tensors without grad, weights that do not sum to 1, huge weights such as
  [1e308, 1e308]): the call must succeed;
- "bad": complex, boolean, string or object dtypes, ragged lists, 0-d or empty arrays, wrong
  dimensions or lengths, NaN or infinite entries (a +inf cost in tokenflow.pot is a forbidden pair,
  bad only when no plan avoids it), negative weights, zero mass, tensors that require grad (outside
  tokenflow.torch and the tokenflow.pot solvers POT differentiates), wrong scalar types: the call
  must raise InputError naming it;
- "extreme": finite but beyond what the arithmetic carries (coordinates of 1e308): either a valid
  result or InputError naming it or the documented FloatingPointError.

Budget: `make test` runs a fixed number of examples per test (20) from a fixed seed (derandomize,
well under a minute); CI (CI=true) draws fresh seeds with the same budget;
TOKENFLOW_HYPOTHESIS_EXAMPLES=N sets another budget. A failure prints the shrunk example and the
blob to reproduce it (@reproduce_failure).
"""
from __future__ import annotations

import inspect
import math
import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokenflow
import tokenflow.pot as ot
import tokenflow.tasks as tasks

torch = pytest.importorskip("torch")
import tokenflow.torch as tt  # noqa: E402

# TOKENFLOW_HYPOTHESIS_EXAMPLES=500 runs a deeper search (fresh seeds with CI=true).
EXAMPLES = int(os.environ.get("TOKENFLOW_HYPOTHESIS_EXAMPLES", "20"))
settings.register_profile("make-test", max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                          print_blob=True, suppress_health_check=list(HealthCheck))
settings.register_profile("ci", max_examples=EXAMPLES, derandomize=False, deadline=None, database=None,
                          print_blob=True, suppress_health_check=list(HealthCheck))
settings.load_profile("ci" if os.environ.get("CI") else "make-test")

GOOD, BAD, EXTREME = "good", "bad", "extreme"


# ---- drawing arrays ------------------------------------------------------------------------------
# An array argument has a role (what it holds) and a valid shape; the strategy draws a valid value
# and then, independently and each with a small probability, a dtype, a shape, a value and a layout
# mutation, so that most examples are valid and every kind of bad input is tried.

ROLES = {
    "points": (-3.0, 3.0),     # coordinates
    "cost": (0.0, 4.0),        # cost matrix entries
    "weights": (0.05, 2.0),    # nonnegative weights (zeros allowed, not all)
    "positive": (0.05, 2.0),   # positive weights (simulate's)
    "unit": (0.0, 1.0),        # positions in [0, 1]
}


def base_values(draw, role, shape):
    low, high = ROLES[role]
    values = draw(st.lists(st.floats(low, high, allow_nan=False, width=64), min_size=int(np.prod(shape)),
                           max_size=int(np.prod(shape))))
    array = np.array(values, dtype=np.float64).reshape(shape)
    if role == "weights" and array.size > 1 and draw(st.booleans()):
        array.flat[draw(st.integers(0, array.size - 1))] = 0.0  # an empty bin, not all of them
    return array


VALUE_MUTATIONS = ["nan", "inf", "-inf", "huge", "negative", "zeros", "scaled_huge", "tiny"]
DTYPE_MUTATIONS = ["float16", "float32", "int64", "uint8", "bool", "complex128", "object", "str"]
SHAPE_MUTATIONS = ["empty", "zero_d", "extra_dim", "drop_dim", "longer", "ragged"]
LAYOUT_MUTATIONS = ["list", "fortran", "strided", "torch", "torch_grad", "torch_float32", "readonly"]


@st.composite
def array_arg(draw, role, shape):
    """(value, description) for an array argument of `role` and valid `shape`."""
    array = base_values(draw, role, shape)
    notes = []
    if draw(st.integers(0, 5)) == 0:
        m = draw(st.sampled_from(VALUE_MUTATIONS))
        notes.append(m)
        flat = array.reshape(-1)
        i = draw(st.integers(0, flat.size - 1))
        if m == "nan":
            flat[i] = np.nan
        elif m == "inf":
            flat[i] = np.inf
        elif m == "-inf":
            flat[i] = -np.inf
        elif m == "huge":
            flat[i] = 1e308
        elif m == "negative":
            flat[i] = -abs(flat[i]) - 0.5
        elif m == "zeros":
            flat[:] = 0.0
        elif m == "scaled_huge":
            flat *= 1e307 / max(abs(flat).max(), 1e-300)
        elif m == "tiny":
            flat *= 1e-300
    value = array
    if draw(st.integers(0, 5)) == 0:
        m = draw(st.sampled_from(DTYPE_MUTATIONS))
        notes.append(m)
        if m == "object":
            value = value.astype(object)
            if value.size:
                value.flat[0] = "x" if draw(st.booleans()) else None
        elif m == "str":
            value = value.astype(str)
        else:
            with np.errstate(all="ignore"):
                value = value.astype(m)
    if draw(st.integers(0, 6)) == 0:
        m = draw(st.sampled_from(SHAPE_MUTATIONS))
        notes.append(m)
        if m == "empty":
            value = np.empty((0,) + np.shape(value)[1:], dtype=np.asarray(value).dtype)
        elif m == "zero_d":
            value = np.asarray(value).reshape(-1)[0] if np.size(value) else np.float64(1.0)
            value = np.array(value)
        elif m == "extra_dim":
            value = np.asarray(value)[None]
        elif m == "drop_dim":
            value = np.asarray(value).reshape(-1) if np.ndim(value) > 1 else np.asarray(value)[:1].reshape(())
        elif m == "longer":
            value = np.concatenate([np.asarray(value), np.asarray(value)[:1]])
        elif m == "ragged":
            rows = np.asarray(value).tolist()
            value = rows[:-1] + [rows[-1][:-1] if isinstance(rows[-1], list) else [rows[-1], rows[-1]]]
    if draw(st.integers(0, 3)) == 0 and isinstance(value, np.ndarray) and value.dtype.kind in "iuf":
        m = draw(st.sampled_from(LAYOUT_MUTATIONS))
        notes.append(m)
        if m == "list":
            value = value.tolist()
        elif m == "fortran":
            value = np.asfortranarray(value)
        elif m == "strided" and value.ndim >= 1:
            wide = np.zeros(value.shape[:-1] + (2 * value.shape[-1],), dtype=value.dtype)
            wide[..., ::2] = value
            value = wide[..., ::2]
        elif m == "readonly":
            value = value.copy()
            value.flags.writeable = False
        elif m.startswith("torch") and value.dtype != np.uint8:
            t = torch.from_numpy(np.ascontiguousarray(value))
            if m == "torch_float32" and t.is_floating_point():
                t = t.float()
            if m == "torch_grad" and t.is_floating_point():
                t.requires_grad_(True)
            value = t
    return value, notes


def as_plain(value):
    """(numpy array or None, reason it is bad or None): the drawn value as the oracle reads it."""
    if isinstance(value, torch.Tensor):
        if value.is_complex() or value.dtype == torch.bool:
            return None, "dtype"
        value = value.detach().numpy()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            array = np.asarray(value)
    except ValueError:
        return None, "ragged"
    if array.dtype.kind not in "iuf":
        return None, f"dtype {array.dtype}"
    return array.astype(np.float64), None


def classify(value, role, shape, torch_ok=False):
    """GOOD, BAD or EXTREME for a drawn array argument of `role` whose valid shape is `shape`."""
    if isinstance(value, torch.Tensor) and value.requires_grad and not torch_ok:
        return BAD
    array, why = as_plain(value)
    if why is not None:
        return BAD
    if array.shape != tuple(shape):
        return BAD
    if not np.all(np.isfinite(array)):
        return BAD
    if role in ("weights", "positive"):
        if np.any(array < 0) or not np.any(array > 0):
            return BAD
        if role == "positive" and np.any(array == 0):
            return BAD
        return GOOD
    if role == "unit" and (np.any(array < 0) or np.any(array > 1)):
        return BAD
    if np.abs(array).max() > 1e6:  # costs of 1e12 and more: some epsilons are too small for them
        return EXTREME
    return GOOD


def points_label(value, d=None, torch_ok=False):
    """(label, n, d) of a drawn point cloud: an (n, d) array or a 1-D array (n points of dimension
    1), any count n >= 1; of dimension `d` when given (a model's)."""
    if isinstance(value, torch.Tensor) and value.requires_grad and not torch_ok:
        return BAD, 0, 0
    array, why = as_plain(value)
    if why is not None or array.ndim not in (1, 2):
        return BAD, 0, 0
    if array.ndim == 1:
        array = array[:, None]
    n, dim = array.shape
    if n == 0 or dim == 0 or (d is not None and dim != d) or not np.all(np.isfinite(array)):
        return BAD, n, dim
    return (EXTREME if np.abs(array).max() > 1e6 else GOOD), n, dim


def same_dimension(*clouds):
    """Labels of point clouds compared with each other: clouds of two dimensions are BAD."""
    dims = {dim for label, _, dim in clouds if label != BAD}
    return [BAD if len(dims) > 1 and label != BAD else label for label, _, _ in clouds]


# ---- drawing scalars ------------------------------------------------------------------------------

BAD_SCALARS = [1 + 2j, "0.1", b"1", None, True, [0.1], object(), float("nan")]


@st.composite
def scalar_arg(draw, valid):
    """(value, GOOD or BAD): mostly one of `valid`, sometimes a value of the wrong type."""
    if draw(st.integers(0, 7)) == 0:
        return draw(st.sampled_from(BAD_SCALARS)), BAD
    value = draw(st.sampled_from(valid))
    if draw(st.integers(0, 4)) == 0 and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = np.array(value)[()] if draw(st.booleans()) else np.array(value)  # numpy scalar, 0-d array
    return value, GOOD


# ---- the property --------------------------------------------------------------------------------

def check_call(call, labels: dict, validate, documented=(), name_of=None, refusals=(), partners=()):
    """Runs call(); `labels` maps argument names to GOOD/BAD/EXTREME. All GOOD: call must return
    a value that validate accepts. Some BAD: InputError naming one of them (or one of `refusals`,
    the errors a function documents for bad input: POT's AssertionError in tokenflow.pot's emd).
    Else (EXTREME): a valid value, InputError naming an EXTREME or BAD argument, or one of
    `documented` (FloatingPointError where the arithmetic cannot carry the result). `partners`:
    groups of arguments checked against each other (points and their weights): a mismatch may be
    reported on any argument of the group of a bad one."""
    bad = {k for k, v in labels.items() if v == BAD}
    extreme = {k for k, v in labels.items() if v == EXTREME}
    for group in partners:
        if set(group) & bad:
            bad |= set(group) & set(labels)
        if set(group) & extreme:
            extreme |= set(group) & set(labels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NormalizationWarning, ConvergenceWarning: values, not errors
        try:
            result = call()
        except tokenflow.InputError as e:
            key = name_of(e) if name_of else e.key
            if extreme and not bad and "rescale" in str(e):
                return  # data beyond what the arithmetic carries at this epsilon or scale, said so
            assert bad or extreme, f"InputError on valid input: {e} ({labels})"
            assert key in bad | extreme, f"InputError names {key!r}, not one of {sorted(bad | extreme)}: {e} ({labels})"
            assert str(e).startswith(f"{e.key}: ") or f": {e.key}: " in str(e), str(e)
            return
        except refusals as e:  # noqa: B030 (a tuple of classes)
            assert bad or extreme, f"{type(e).__name__} on valid input {labels}: {e}"
            return
        except documented as e:  # noqa: B030
            assert extreme and not bad, f"{type(e).__name__} on {labels}: {e}"
            return
    assert not bad, f"no InputError for bad {sorted(bad)}: returned {result!r}"
    validate(result)


def finite(value) -> bool:
    if isinstance(value, torch.Tensor):
        value = value.detach().numpy()
    return bool(np.all(np.isfinite(np.asarray(value, dtype=float))))


def assert_coupling(plan, a, b, atol):
    """plan >= 0 with marginals a and b within atol, plus the rounding of the plan's own dtype (the
    pot functions return it in their input's precision: float16 rounds at 2^-11 relative)."""
    if isinstance(plan, torch.Tensor):
        plan = plan.detach().numpy()
    dtype = np.asarray(plan).dtype
    if dtype.kind == "f" and dtype.itemsize < 8:
        atol = atol + 2 * max(np.shape(plan)) * float(np.finfo(dtype).eps) * max(1.0, float(np.sum(a)))
    plan = np.asarray(plan, dtype=float)
    assert finite(plan) and plan.min() >= 0, plan
    assert np.allclose(plan.sum(1), a, rtol=0, atol=atol), (plan.sum(1), a)
    assert np.allclose(plan.sum(0), b, rtol=0, atol=atol), (plan.sum(0), b)


def normalized(w, size):
    if w is None:
        return np.full(size, 1.0 / size)
    array = as_plain(w)[0]
    array = np.ldexp(array, -math.frexp(array.max())[1])
    return array / array.sum()


@st.composite
def sizes(draw, max_n=5, max_d=3):
    return draw(st.integers(1, max_n)), draw(st.integers(1, max_n)), draw(st.integers(1, max_d))


OT_PARTNERS = ({"x", "y"}, {"x", "a"}, {"y", "b"}, {"M", "a"}, {"M", "b"})


def draw_clouds(data):
    """Two drawn point clouds x, y and weights a of x: (x, y, a, (n, m) as drawn, (nx, ny) as
    given, labels of x and y: clouds of two dimensions are BAD)."""
    n, m, d = data.draw(sizes())
    x, _ = data.draw(array_arg("points", (n, d)))
    y, _ = data.draw(array_arg("points", (m, d)))
    a, _ = data.draw(array_arg("weights", (n,)))
    px, py = points_label(x), points_label(y)
    lx, ly = same_dimension(px, py)
    return x, y, a, (n, m), (px[1] or n, py[1] or m), {"x": lx, "y": ly}


# ---- tokenflow: optimal transport -------------------------------------------------------------------

@given(st.data())
def test_sinkhorn(data):
    x, y, a, (n, m), (nx, ny), labels = draw_clouds(data)
    b, _ = data.draw(array_arg("weights", (m,)))
    eps, eps_label = data.draw(scalar_arg([0.1, 0.5, 1, 2.0]))
    use_a, use_b = data.draw(st.booleans()), data.draw(st.booleans())
    labels.update({"epsilon": eps_label, "a": classify(a, "weights", (nx,)) if use_a else GOOD,
                   "b": classify(b, "weights", (ny,)) if use_b else GOOD})

    def validate(r):
        assert r.plan.shape == (nx, ny) and finite(r.f) and finite(r.g) and math.isfinite(r.cost)
        assert np.isclose(r.a.sum(), 1) and np.isclose(r.b.sum(), 1)
        slack = r.marginal_error + 1e-12
        assert_coupling(r.plan, r.a, r.b, slack)
        if r.converged:
            assert r.marginal_error < 1e-9

    check_call(lambda: tokenflow.sinkhorn(x, y, a if use_a else None, b if use_b else None, epsilon=eps, progress=False),
               labels, validate, documented=(FloatingPointError,), partners=OT_PARTNERS)


@given(st.data())
def test_sinkhorn_and_exact_ot_with_a_cost_matrix(data):
    n, m, _ = data.draw(sizes())
    M, _ = data.draw(array_arg("cost", (n, m)))
    a, _ = data.draw(array_arg("weights", (n,)))
    b, _ = data.draw(array_arg("weights", (m,)))
    plain_M, why = as_plain(M)
    if why is None and plain_M.ndim == 2 and plain_M.size > 0:
        n, m = plain_M.shape  # any shape of M: the weights must match it (a longer M and a longer a agree)
    labels = {"a": classify(a, "weights", (n,)), "b": classify(b, "weights", (m,))}
    # +inf entries are forbidden pairs: valid when a plan avoids them (docs/ot.md).
    labels["M"], forbidden = forbidden_cost_label(M, n, m, normalized(a, n) if labels["a"] == GOOD else None,
                                                  normalized(b, m) if labels["b"] == GOOD else None)

    def validate_exact(r):
        assert_coupling(r.plan, normalized(a, n), normalized(b, m), 1e-9)
        costs = as_plain(M)[0]
        if forbidden is not None:
            assert np.all(r.plan[forbidden] == 0)
            costs = np.where(forbidden, 0.0, costs)
        assert math.isclose(r.cost, float((r.plan * costs).sum()), rel_tol=1e-9, abs_tol=1e-12)

    check_call(lambda: tokenflow.exact_ot(a=a, b=b, M=M), labels, validate_exact, documented=(FloatingPointError,),
               partners=OT_PARTNERS)
    check_call(lambda: tokenflow.sinkhorn(a=a, b=b, M=M, reg=0.5, progress=False), labels,
               lambda r: assert_coupling(r.plan, normalized(a, n), normalized(b, m), r.marginal_error + 1e-12),
               documented=(FloatingPointError,), partners=OT_PARTNERS)


@given(st.data())
def test_exact_ot_and_wasserstein_on_points(data):
    x, y, a, _, (nx, ny), labels = draw_clouds(data)
    p, p_label = data.draw(scalar_arg([1, 2, 1.5, 3.0]))
    labels["a"] = classify(a, "weights", (nx,))
    check_call(lambda: tokenflow.exact_ot(x, y, a=a), labels,
               lambda r: assert_coupling(r.plan, normalized(a, nx), np.full(ny, 1 / ny), 1e-9),
               documented=(FloatingPointError,), partners=OT_PARTNERS)
    check_call(lambda: tokenflow.wasserstein(x, y, p=p, a=a, progress=False), {**labels, "p": p_label},
               lambda w: (math.isfinite(w) and w >= 0) or pytest.fail(f"W_p = {w}"), documented=(FloatingPointError,),
               partners=OT_PARTNERS)


@given(st.data())
def test_conditional_wasserstein_positions(data):
    n, _, d = data.draw(sizes())
    x, y = np.random.default_rng(0).normal(size=(n, d)), np.random.default_rng(1).normal(size=(n, d))
    px, _ = data.draw(array_arg("unit", (n,)))
    py = np.array(as_plain(px)[0])[::-1] if as_plain(px)[1] is None and np.shape(px) == (n,) else np.linspace(0, 1, n)
    labels = {"positions_x": classify(px, "unit", (n,))}
    if labels["positions_x"] == GOOD and set(as_plain(px)[0].tolist()) != set(py.tolist()):
        labels["positions_x"] = BAD  # a position with tokens on one side only
    check_call(lambda: tokenflow.wasserstein(x, y, positions_x=px, positions_y=py, progress=False), labels,
               lambda w: math.isfinite(w) and w >= 0 or pytest.fail(str(w)), documented=(FloatingPointError,),
               name_of=lambda e: "positions_x" if e.key in ("positions_x", "positions_y") else e.key)


# ---- tokenflow: the particle flow and attention ----------------------------------------------------

SMALL_RUN = {"run": {"T": 0.02, "dt": 0.01}}


@given(st.data())
def test_simulate_and_attention(data):
    n, _, d = data.draw(sizes(max_n=6))
    x, _ = data.draw(array_arg("points", (n, d)))
    w, _ = data.draw(array_arg("positive", (n,)))
    pos, _ = data.draw(array_arg("unit", (n,)))
    t, t_label = data.draw(scalar_arg([0.0, 0.5]))
    use_w, use_pos = data.draw(st.booleans()), data.draw(st.booleans())
    lx, nx, dx = points_label(x)
    labels = {"x": lx, "weights": classify(w, "positive", (nx or n,)) if use_w else GOOD,
              "positions": classify(pos, "unit", (nx or n,)) if use_pos else GOOD}
    kw = {"weights": w if use_w else None, "positions": pos if use_pos else None}
    partners = ({"x", "weights"}, {"x", "positions"}, {"x0", "weights"}, {"x0", "positions"})
    check_call(lambda: tokenflow.simulate(SMALL_RUN, x0=x, progress=False, **kw), {**labels, "x0": labels.pop("x")},
               lambda r: r.positions.shape == (nx, dx) and (finite(r.positions) or r.status == "blowup")
               or pytest.fail(repr(r)), documented=(FloatingPointError,), partners=partners)
    labels["x"] = lx
    config = {"attention": {"kind": data.draw(st.sampled_from(["softmax", "l2", "sinkhorn"]))}}
    # Logits that overflow for extreme points are refused naming the attention's key ("rescale Q, K
    # or the points"): the config and the points together. Logits beyond 700 (|x|^2 with Q = K = I)
    # overflow exp: the energies, and a Sinkhorn attention that cannot converge, raise
    # FloatingPointError (documented).
    points_or_config = lambda e: "x" if e.key.startswith("attention.") else e.key  # noqa: E731
    plain = as_plain(x)[0]
    if labels["x"] == GOOD and np.abs(plain).max() ** 2 * plain.shape[-1] > 700:
        labels["x"] = EXTREME
    check_call(lambda: tokenflow.attention_matrix(config, x, t=t, **kw), {**labels, "t": t_label},
               lambda A: A.shape == (nx, nx) and finite(A) or pytest.fail(str(A)), documented=(FloatingPointError,),
               partners=partners, name_of=points_or_config)
    check_call(lambda: tokenflow.attention_field(config, x, t=t, **kw), {**labels, "t": t_label},
               lambda v: v.shape == (nx, dx) and finite(v) or pytest.fail(str(v)), documented=(FloatingPointError,),
               partners=partners, name_of=points_or_config)
    energy_labels = {k: v for k, v in labels.items() if k != "positions"}
    for fn in (tokenflow.interaction_energy, tokenflow.metric_slope, tokenflow.energy_rate):
        check_call(lambda: fn({"attention": {"scale": 1.0}}, x, weights=kw["weights"]), energy_labels,
                   lambda e: math.isfinite(e) or pytest.fail(str(e)), documented=(FloatingPointError,),
                   partners=partners)


# ---- configs: every function that takes one -----------------------------------------------------
# Config values of the wrong kind (complex, objects, None, nested junk) are InputError naming the key.

CONFIG_FUNCTIONS = {
    "simulate": lambda c: tokenflow.simulate({**c, "init": {"n": 4}, **SMALL_RUN}, progress=False),
    "gaussian": lambda c: tokenflow.gaussian({**c, "run": {"T": 0.05}}, progress=False),
    "meanfield": lambda c: tokenflow.meanfield({**c, "meanfield": {"ns": [8], "seeds": 1}}, progress=False),
    "stability": lambda c: tokenflow.stability({**c, "init": {"n": 4}, "run": {"T": 0.02, "dt": 0.01}}, progress=False),
    "train": lambda c: tokenflow.train({**c, "task": {"n": 3}, "model": {"width": 4, "layers": 1, "k": 2, "heads": 1},
                                        "train": {"steps": 1, "batch": 1, "test_pairs": 1}}, progress=False),
    "tasks.describe": lambda c: tasks.describe(c),
    "tasks.sample": lambda c: tasks.sample(c, 1),
    "to_toml": lambda c: tokenflow.to_toml(c),
}
BAD_CONFIG_VALUES = [1j, object(), None, {1, 2}, [1, "a", None], b"\xff", np.array([1j])]


@given(st.sampled_from(sorted(CONFIG_FUNCTIONS)), st.sampled_from(["seed", "dtype"]),
       st.sampled_from(range(len(BAD_CONFIG_VALUES))))
def test_config_values_of_the_wrong_kind(function, key, which):
    value = BAD_CONFIG_VALUES[which]
    with pytest.raises(tokenflow.InputError) as e:
        CONFIG_FUNCTIONS[function]({key: value})
    assert e.value.key in (key, "config"), str(e.value)
    assert str(e.value).startswith(f"{key}: ") or "config" in str(e.value), str(e.value)


@given(st.sampled_from(sorted(CONFIG_FUNCTIONS)), st.sampled_from([3, 2.5, "not a file \xff", b"/nonexistent\xff",
                                                                     ["run"], np.zeros(2)]))
def test_configs_that_are_not_dicts_or_paths(function, config):
    raw = {"simulate": tokenflow.simulate, "gaussian": tokenflow.gaussian, "meanfield": tokenflow.meanfield,
           "stability": tokenflow.stability, "train": tokenflow.train, "tasks.describe": tasks.describe,
           "tasks.sample": tasks.sample, "to_toml": tokenflow.to_toml}[function]
    with pytest.raises(tokenflow.InputError) as e:
        raw(config)
    assert "config" in str(e.value) or "nonexistent" in str(e.value) or "not a file" in str(e.value), str(e.value)


def test_config_listings():
    assert {k["name"] for k in tokenflow.attention_kinds()} >= {"softmax", "l2"}
    for command in ("simulate", "gaussian", "meanfield", "stability", "train"):
        assert tokenflow.config_keys(command)
    for bad in (3, None, "simulat", b"train"):
        with pytest.raises(tokenflow.InputError) as e:
            tokenflow.config_keys(bad)
        assert e.value.key == "command", str(e.value)


@given(st.sampled_from(["progress", "count", "seed", "test"]), st.sampled_from(BAD_SCALARS[:7] + [-1, 2**70]))
def test_scalar_arguments_of_tasks_sample(name, value):
    args = {"count": 1, "seed": None, "test": False}
    if name == "progress":
        with pytest.raises(tokenflow.InputError) as e:
            tokenflow.simulate(SMALL_RUN, progress=value if value is not None else 3)
        assert e.value.key == "progress"
        return
    if name == "seed" and value is None or name == "test" and value is True:
        return  # seed None (the config's) and test=True are valid
    args[name] = value
    with pytest.raises(tokenflow.InputError) as e:
        tasks.sample({"task": {"kind": "sorting", "n": 3}}, **args)
    assert e.value.key == name, str(e.value)


# ---- tokenflow.tasks -----------------------------------------------------------------------------

def a_pair(n, m, d, rng):
    target = rng.uniform(0.1, 1.0, size=(n, m))
    return tasks.TaskPair(rng.normal(size=(n, d)), rng.normal(size=(m, d)), target=target / target.sum())


@given(st.data())
def test_tasks_check_pack_save_load(tmp_path_factory, data):
    n, m, d = data.draw(sizes(max_n=4))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    good = a_pair(n, m, d, rng)
    x, _ = data.draw(array_arg("points", (n, d)))
    target, _ = data.draw(array_arg("weights", (n, m)))
    a, _ = data.draw(array_arg("weights", (n,)))
    n_good = n
    plain_target, target_why = as_plain(target)
    if target_why is None and plain_target.ndim == 2 and plain_target.shape[0] > 0 and plain_target.shape[1] == m:
        n = plain_target.shape[0]  # the target's rows fix x's (a longer target with a longer x agree)
    target_label = classify(target, "weights", (n, m))
    if target_label == GOOD:  # a coupling of total mass 1 within 1e-9, every token with mass; else refused
        t = as_plain(target)[0]
        target_label = GOOD if abs(t.sum() - 1) < 1e-12 and t.sum(0).min() > 0 and t.sum(1).min() > 0 else BAD
    pair = {"x": x, "y": good.y, "target": target}
    use_a = data.draw(st.booleans())
    if use_a:
        pair["a"] = a
    lx, nx, dx = points_label(x, d)
    labels = {"x": BAD if lx == BAD or nx != n else GOOD, "target": target_label}  # n rows: the target's
    if use_a:
        labels["a"] = BAD  # a must equal the target's row sums, which a drawn a is not
        if target_label == GOOD:
            pair["a"] = as_plain(target)[0].sum(1) if classify(a, "weights", (n,)) == GOOD else a
            labels["a"] = GOOD if classify(a, "weights", (n,)) == GOOD else BAD

    def validate(pairs):
        p, = pairs
        assert np.isclose(p.a.sum(), 1) and np.isclose(p.b.sum(), 1) and p.target.shape == (n, m)

    labels.setdefault("a", GOOD)  # a and b not given: the target's marginals (a zero one is the target's fault)
    check_call(lambda: tasks.check([pair]), {**labels, "b": GOOD, "y": GOOD}, validate, name_of=lambda e: e.key,
               partners=({"x", "target"}, {"a", "target"}, {"b", "target"}, {"x", "y"}))
    if all(v == GOOD for v in labels.values()):
        folder = tmp_path_factory.mktemp("data") / "set"
        single = data.draw(st.booleans())
        tasks.save(folder, [pair, good], [good], single_file=single)
        train, test = tasks.load(folder)
        assert len(train) == 2 and len(test) == 1 and np.allclose(train[1].target, good.target)
        packed = tasks.pack([pair, good])
        assert packed["x_offsets"].tolist() == [0, n, n + n_good]


@given(st.sampled_from([[], None, "pairs", 3, [3], [{"x": 1}], [{"X": np.zeros((1, 1))}], {"x": 1}]))
def test_tasks_lists_of_pairs_that_are_not(pairs):
    good = a_pair(2, 2, 1, np.random.default_rng(0))
    for call, names in [(lambda: tasks.check(pairs), ("pairs",)), (lambda: tasks.pack(pairs), ("pairs",)),
                        (lambda: tasks.save("/nonexistent-parent/x", [good], pairs), ("test_pairs", "path"))]:
        if pairs == [] and call is not None and names == ("pairs",) and call.__code__ is not None:
            pass
        try:
            result = call()
        except tokenflow.InputError as e:
            assert any(str(e).startswith(f"{name}") for name in names) or "path" in str(e), str(e)
        else:
            assert pairs == [] and result == [], result  # check([]) is an empty list of checked pairs


def test_tasks_save_refuses_what_load_would_refuse_and_names_the_users_path(tmp_path):
    good = a_pair(2, 3, 2, np.random.default_rng(0))
    for pairs, test_pairs, name in [([], [good], "pairs"), ([good], [], "test_pairs"), ([good], None, "test_pairs")]:
        with pytest.raises(tokenflow.InputError) as e:
            tasks.save(tmp_path / "d", pairs, test_pairs)
        assert e.value.key == name, str(e.value)
        assert not (tmp_path / "d").exists()
    other_d = a_pair(2, 3, 3, np.random.default_rng(1))
    with pytest.raises(tokenflow.InputError, match="^test_pairs: has points of dimension 3"):
        tasks.save(tmp_path / "d", [good], [other_d])
    with pytest.raises(tokenflow.InputError) as e:
        tasks.save(tmp_path / "no" / "such" / "folder", [good], [good])
    assert str(tmp_path / "no" / "such" / "folder") in str(e.value) and ".partial" not in str(e.value)
    os.chmod(tmp_path, 0o500)
    try:
        if os.access(tmp_path, os.W_OK):  # root writes anyway
            return
        with pytest.raises(PermissionError) as e:
            tasks.save(tmp_path / "d", [good], [good])
        assert str(tmp_path / "d") in str(e.value) and ".partial" not in str(e.value)
    finally:
        os.chmod(tmp_path, 0o700)


def test_non_utf8_paths_are_named_not_a_unicode_error(tmp_path):
    raw = os.fsencode(tmp_path) + b"/caf\xe9"
    for call in (lambda: tasks.load(raw), lambda: tasks.load(os.fsdecode(raw)),
                 lambda: tokenflow.simulate(raw), lambda: tokenflow.SinkhornTransformer.load(raw)):
        with pytest.raises(tokenflow.InputError) as e:
            call()
        assert "caf\\xe9" in str(e.value), str(e.value)
    good = a_pair(2, 2, 1, np.random.default_rng(0))
    tasks.save(raw, [good], [good])
    train, test = tasks.load(raw)
    assert np.array_equal(train[0].target, good.target)


# ---- tokenflow.SinkhornTransformer ---------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_model():
    return tokenflow.train({"task": {"kind": "matching", "n": 4}, "model": {"width": 8, "layers": 1, "heads": 2, "k": 4},
                            "train": {"steps": 1, "batch": 2, "test_pairs": 2}}, progress=False).model


@given(st.data())
def test_couple(tiny_model, data):
    n, m, _ = data.draw(sizes())
    x, _ = data.draw(array_arg("points", (n, 2)))
    y, _ = data.draw(array_arg("points", (m, 2)))
    b, _ = data.draw(array_arg("positive", (m,)))  # couple's weights are positive (every token has mass)
    unrolled, u_label = data.draw(st.sampled_from([(False, GOOD), (True, GOOD), ("yes", BAD), (None, BAD)]))
    (lx, nx, _), (ly, ny, _) = points_label(x, 2), points_label(y, 2)
    labels = {"x": lx, "y": ly, "b": classify(b, "positive", (ny or m,)), "unrolled": u_label}

    def validate(plan):
        assert plan.shape == (nx, ny) and finite(plan)
        assert np.allclose(plan.sum(0), normalized(b, ny), atol=1e-6)

    check_call(lambda: tiny_model.couple(x, y, b=b, unrolled=unrolled), labels, validate,
               documented=(FloatingPointError,), partners=({"y", "b"},))


def test_model_paths(tiny_model, tmp_path):
    for bad in (3, None, "", b"a\0b"):
        with pytest.raises(tokenflow.InputError) as e:
            tiny_model.save(bad)
        assert e.value.key == "path", str(e.value)
        with pytest.raises(tokenflow.InputError) as e:
            tokenflow.SinkhornTransformer.load(bad)
        assert e.value.key == "path", str(e.value)


# ---- tokenflow.pot ---------------------------------------------------------------------------------

def pot_weights(w, n, torch_ok=False):
    """(label, the masses POT uses): POT reads an empty histogram as uniform. torch_ok: tensors
    that require grad are accepted (the solvers POT differentiates)."""
    if getattr(w, "requires_grad", False) and not torch_ok:
        return BAD, None
    array, why = as_plain(w)
    if why is None and array.shape == (0,):
        return GOOD, np.full(n, 1.0 / n)
    label = classify(w, "weights", (n,), torch_ok=torch_ok)
    return label, array if label == GOOD else None


def plan_exists(allowed, a, b) -> bool:
    """Whether a plan of marginals a, b carries no mass on the pairs that `allowed` forbids:
    Hall's condition, sum of a over any set S of rows <= sum of b over the columns S may reach,
    tried on every set (a few rows), with the rounding of the sums (2^-40 relative) as slack."""
    rows = np.flatnonzero(a > 0)
    for k in range(1, 2 ** len(rows)):
        S = rows[[bool(k >> t & 1) for t in range(len(rows))]]
        reach = allowed[S].any(axis=0) & (b > 0)
        if a[S].sum() > b[reach].sum() + 2.0**-40 * a.sum():
            return False
    return True


def forbidden_cost_label(M, n, m, a, b, grad=False, torch_ok=False):
    """(label of a cost matrix M of a balanced problem, mask of its forbidden pairs or None):
    +inf entries are forbidden pairs (POT's convention), valid when some plan of marginals a, b
    (normalized weights, None when bad) avoids them and refused (InputError naming M) when none
    does, or when a tensor requires grad (gradients are not defined through them); NaN and -inf
    are bad, as anywhere."""
    array, why = as_plain(M)
    if why is not None or array.shape != (n, m) or not np.any(array == np.inf):
        return classify(M, "cost", (n, m), torch_ok=torch_ok), None
    forbidden = array == np.inf
    label = classify(np.where(forbidden, 0.0, array), "cost", (n, m))
    if label == BAD or grad or (getattr(M, "requires_grad", False) and not torch_ok):
        return BAD, forbidden
    known = a is not None and b is not None and np.isfinite(a.sum()) and np.isfinite(b.sum())
    if known and not plan_exists(~forbidden, a / a.sum(), b / b.sum()):
        return BAD, forbidden
    return label, forbidden


# tokenflow.pot's solvers of histogram problems: (name, call with (a, b, M), returns a plan).
POT_HISTOGRAM_SOLVERS = [
    ("emd", ot.emd, True), ("emd2", ot.emd2, False),
    ("sinkhorn", lambda *z: ot.sinkhorn(*z, 1.0), True), ("sinkhorn2", lambda *z: ot.sinkhorn2(*z, 1.0), False),
    *[(name, lambda *z, f=getattr(ot.bregman, name): f(*z, 1.0), True)
      for name in ("sinkhorn_knopp", "sinkhorn_log", "greenkhorn", "sinkhorn_stabilized", "sinkhorn_epsilon_scaling")],
]


@given(st.data())
def test_pot_histogram_solvers(data):
    n, m, _ = data.draw(sizes())
    M, _ = data.draw(array_arg("cost", (n, m)))
    a, _ = data.draw(array_arg("weights", (n,)))
    plain_M, why = as_plain(M)
    if why is None and plain_M.ndim == 2 and plain_M.shape[0] > 0 and plain_M.shape[1] == m:
        n = plain_M.shape[0]  # any number of rows; a must match it (an empty a: uniform over them)
    # Tensors that require grad are taken (POT differentiates these solvers).
    a_label, masses = pot_weights(a, n, torch_ok=True)
    mass = masses.sum() if a_label == GOOD else 1.0
    b = np.full(m, mass / m)
    grad = any(getattr(t, "requires_grad", False) for t in (M, a))
    M_label, forbidden = forbidden_cost_label(M, n, m, masses if a_label == GOOD else None, b, grad, torch_ok=True)
    # emd and emd2 differentiate by the envelope theorem (the plan itself), defined with forbidden
    # pairs too: their M is labelled as without gradients.
    exact_M_label, _ = forbidden_cost_label(M, n, m, masses if a_label == GOOD else None, b, False, torch_ok=True)
    labels = {"M": M_label, "a": a_label}
    if not np.isfinite(mass) or mass > 1e300 or mass < 1e-200:
        # A mass beyond the range of double (POT's sums overflow), or so small that POT's stopThr,
        # an absolute error, divided by it asks for nothing (the plan is not solved to any accuracy).
        labels["a"] = EXTREME

    def plan_check(plan, entropic, warned):
        # Returned in M's precision (POT's type_as): float16 rounds to 2^-11 relative.
        plan = plan.detach().numpy() if isinstance(plan, torch.Tensor) else np.asarray(plan)
        if forbidden is not None:
            assert np.all(plan[forbidden] == 0), plan
        if mass < 1e-200:
            return  # POT's stopThr is absolute: divided by a tiny mass it asks for no accuracy at all
        if entropic and forbidden is not None and warned:
            # Forbidden pairs that leave little room (Hall's condition nearly tight) slow Sinkhorn
            # down, as POT's: a plan that is not a coupling to the tolerance must say so.
            assert finite(plan) and plan.min() >= 0, plan
            return
        eps = np.finfo(plan.dtype).eps if plan.dtype.kind == "f" else 2.0**-52
        assert_coupling(plan, masses, b, max(1e-6, 4 * m * eps) * mass)

    def cost_check(value):  # costs may be negative
        assert math.isfinite(float(value))

    def call_warned(fn):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = fn(a, b, M)
        return result, any(issubclass(w.category, tokenflow.ConvergenceWarning) for w in caught)

    for name, fn, returns_plan in POT_HISTOGRAM_SOLVERS:
        entropic = not name.startswith("emd")
        check = ((lambda r, e=entropic: plan_check(r[0], e, r[1])) if returns_plan
                 else (lambda r: cost_check(r[0])))
        solver_labels = {**labels, "M": labels["M"] if entropic else exact_M_label}
        check_call(lambda: call_warned(fn), {**solver_labels, "b": GOOD}, check, documented=(FloatingPointError,),
                   refusals=(AssertionError,), partners=({"M", "a"}, {"M", "b"}))


@given(st.data())
def test_pot_samples_and_dist(data):
    n, m, d = data.draw(sizes())
    xs, _ = data.draw(array_arg("points", (n, d)))
    xt = np.random.default_rng(0).normal(size=(m, d))
    lx, nx, _ = points_label(xs, d)
    array, why = as_plain(xs)
    labels = {"X_s": lx if why is None and array.ndim == 2 else BAD, "X_t": GOOD}  # POT's samples are 2-D
    n = nx or n
    check_call(lambda: ot.dist(xs, xt), {"x1": labels["X_s"], "x2": GOOD},
               lambda M: M.shape == (n, m) and finite(M) or pytest.fail(str(M)), documented=(FloatingPointError,),
               partners=({"x1", "x2"},))
    check_call(lambda: ot.empirical_sinkhorn(xs, xt, 1.0), labels,
               lambda P: assert_coupling(P, np.full(n, 1 / n), np.full(m, 1 / m), 1e-6),
               documented=(FloatingPointError,), partners=({"X_s", "X_t"},))
    check_call(lambda: ot.empirical_sinkhorn2(xs, xt, 1.0), labels,
               lambda v: math.isfinite(v) or pytest.fail(str(v)), documented=(FloatingPointError,), partners=({"X_s", "X_t"},))
    check_call(lambda: ot.empirical_sinkhorn_divergence(xs, xt, 1.0), labels,
               lambda v: math.isfinite(v) or pytest.fail(str(v)), documented=(FloatingPointError,), partners=({"X_s", "X_t"},))


@given(st.data())
def test_pot_one_dimensional(data):
    n, m, _ = data.draw(sizes())
    u, _ = data.draw(array_arg("points", (n,)))
    v = np.random.default_rng(0).normal(size=m)
    uw, _ = data.draw(array_arg("weights", (n,)))
    plain_u, why = as_plain(u)
    if why is None and plain_u.ndim == 1 and plain_u.size:
        n = plain_u.size  # any number of samples; their weights must match it
    w_label, masses = pot_weights(uw, n)
    mass = masses.sum() if w_label == GOOD else 1.0
    vw = np.full(m, mass / m)
    labels = {"u_values": classify(u, "points", (n,)), "u_weights": w_label}
    if not np.isfinite(mass) or mass > 1e300:
        labels["u_weights"] = EXTREME
    check_call(lambda: ot.wasserstein_1d(u, v, uw, vw), labels,
               lambda w: math.isfinite(float(w)) and float(w) >= 0 or pytest.fail(str(w)),
               documented=(FloatingPointError,), partners=({"u_values", "u_weights"},))
    # emd_1d takes (n, 1) samples as 1-D ones (POT's monodimensional data); wasserstein_1d reads a
    # 2-D array as one problem per column.
    column = as_plain(u)[1] is None and as_plain(u)[0].shape == (n, 1) and not getattr(u, "requires_grad", False)
    renamed = {"x_a": classify(as_plain(u)[0].reshape(n), "points", (n,)) if column else labels["u_values"],
               "a": labels["u_weights"]}

    def plan_check(plan):
        assert_coupling(plan, masses, vw, 1e-9 * max(1.0, mass))

    check_call(lambda: ot.emd_1d(u, v, uw, vw), renamed, plan_check, documented=(FloatingPointError,),
               refusals=(AssertionError,), partners=({"x_a", "a"},))
    check_call(lambda: ot.emd2_1d(u, v, uw, vw), renamed, lambda c: math.isfinite(c) and c >= 0 or pytest.fail(str(c)),
               documented=(FloatingPointError,), refusals=(AssertionError,), partners=({"x_a", "a"},))


def draw_cost_problem(data, valid_scalars):
    """(n, m, a drawn cost matrix, drawn weights of its rows, a drawn scalar and its label)."""
    n, m, _ = data.draw(sizes())
    M, _ = data.draw(array_arg("cost", (n, m)))
    a, _ = data.draw(array_arg("weights", (n,)))
    return (n, m, M, a, *data.draw(scalar_arg(valid_scalars)))


@given(st.data())
def test_pot_unbalanced(data):
    n, m, M, a, reg_m, reg_m_label = draw_cost_problem(data, [0.5, 1.0, 10.0])
    plain_M, why = as_plain(M)
    if why is None and plain_M.ndim == 2 and plain_M.shape[0] > 0 and plain_M.shape[1] == m:
        n = plain_M.shape[0]
    b = np.full(m, 1.0 / m)
    a_label, masses = pot_weights(a, n)
    if a_label == GOOD and masses.sum() > 1e300:
        a_label = EXTREME  # unbalanced masses are data: one of 1e308 overflows the objective
    M_label = classify(M, "cost", (n, m))
    plain_M, why = as_plain(M)
    if (why is None and plain_M.shape == (n, m) and np.any(plain_M == np.inf)
            and not getattr(M, "requires_grad", False)):
        # +inf: a forbidden pair (POT's kernel is 0 there); a row or column with mass and no
        # allowed pair is refused (check_forbidden_pairs), else mass simply stays behind.
        allowed = plain_M < np.inf
        M_label = classify(np.where(allowed, plain_M, 0.0), "cost", (n, m))
        if a_label == GOOD and (np.any((masses > 0) & ~allowed.any(axis=1))
                                or not np.all(allowed[masses > 0].any(axis=0))):
            M_label = BAD
    labels = {"M": M_label, "a": a_label, "b": GOOD, "reg_m": reg_m_label}
    partners = ({"M", "a"}, {"M", "b"})
    check_call(lambda: ot.unbalanced.sinkhorn_unbalanced(a, b, M, 1.0, reg_m), labels,
               lambda P: np.shape(P) == (n, m) and finite(P) and float(P.min()) >= 0 or pytest.fail(str(P)),
               documented=(FloatingPointError,), partners=partners)
    check_call(lambda: ot.unbalanced.sinkhorn_unbalanced2(a, b, M, 1.0, reg_m), labels,
               lambda v: finite(v) or pytest.fail(str(v)), documented=(FloatingPointError,), partners=partners)


@given(st.sampled_from([0, -1, 1.5, "3", None, 1j, True, 2**70]))
def test_pot_unif_refuses_what_is_not_a_positive_count(n):
    with pytest.raises(tokenflow.InputError) as e:
        ot.unif(n)
    assert e.value.key == "n", str(e.value)


@given(st.integers(1, 10**6))
def test_pot_unif_float32_histograms_raise_no_normalization_warning(n):
    a = ot.unif(n).astype(np.float32)
    M = np.zeros((n, 1)) if n <= 2000 else None
    with warnings.catch_warnings():
        warnings.simplefilter("error", tokenflow.NormalizationWarning)
        if M is not None:
            tokenflow.exact_ot(a=a, b=[1.0], M=M)
        from tokenflow._inputs import as_weights
        as_weights("a", a)


# ---- tokenflow.torch ---------------------------------------------------------------------------------

@given(st.data())
def test_torch_sinkhorn(data):
    n, m, C, a, eps, eps_label = draw_cost_problem(data, [0.5, 1.0, 2])
    as_tensor = data.draw(st.booleans()) and isinstance(C, np.ndarray) and C.dtype.kind == "f" and C.dtype.itemsize >= 4
    if as_tensor:
        C = torch.tensor(C, requires_grad=True)
    plain_C, why = as_plain(C)
    if why is None and plain_C.ndim in (2, 3) and plain_C.shape[-1] > 0:
        m = plain_C.shape[-1]  # any number of columns (b is uniform)
    batch_of_one = why is None and plain_C.shape == (1, n, m)  # (B, n, m) with B = 1
    labels = {"C": classify(C, "cost", (1, n, m) if batch_of_one else (n, m), torch_ok=True),
              "a": classify(a, "weights", (n,), torch_ok=True), "epsilon": eps_label}
    plain_a, a_why = as_plain(a)
    a_row = batch_of_one and a_why is None and plain_a.shape == (1, n) and not getattr(a, "requires_grad", False)
    if a_row:
        labels["a"] = classify(plain_a[0], "weights", (n,))  # one row of weights per problem of the batch (B = 1)

    def validate(pi):
        pi = pi[0] if batch_of_one else pi
        assert_coupling(pi.detach(), normalized(plain_a[0] if a_row else a, n), np.full(m, 1 / m), 1e-6)  # in C's dtype
        leaves = [t for t in (C, a) if isinstance(t, torch.Tensor) and t.requires_grad]
        if leaves:
            grads = torch.autograd.grad((pi * torch.arange(n * m, dtype=pi.dtype).reshape(n, m)).sum(), leaves)
            assert all(finite(g) for g in grads)

    check_call(lambda: tt.sinkhorn(C, a=a, epsilon=eps), labels, validate,
               documented=(FloatingPointError, tt.ConvergenceError), partners=({"C", "a"},))


@given(st.data())
def test_torch_divergence_samples_and_cost_matrix(data):
    n, m, d = data.draw(sizes())
    x, _ = data.draw(array_arg("points", (n, d)))
    y = torch.randn(m, d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    b, _ = data.draw(array_arg("weights", (m,)))
    lx, nx, _ = points_label(x, d, torch_ok=True)
    array, why = as_plain(x)
    if array is None:
        array = np.zeros((0,))
    two_d = why is None and array.ndim == 2
    labels = {"x": lx if two_d else BAD, "y": GOOD, "b": classify(b, "weights", (m,), torch_ok=True)}
    documented, partners = (FloatingPointError, tt.ConvergenceError), ({"x", "y"},)
    check_call(lambda: tt.sinkhorn_divergence(x, y, b=b, epsilon=1.0), labels,
               lambda s: finite(s) or pytest.fail(str(s)), documented=documented, partners=partners)
    plain_b, b_why = as_plain(b)
    samples_labels = dict(labels)
    if b_why is None and plain_b.shape == (1, m):  # one row per pair of the batch (B = 1), with or without grad
        samples_labels["b"] = classify(plain_b[0], "weights", (m,))
    check_call(lambda: tt.sinkhorn_samples(x, y, b=b, epsilon=1.0), samples_labels,
               lambda r: r.plan.shape == (nx, m) and finite(r.divergence) or pytest.fail(str(r)), documented=documented,
               partners=partners)
    # cost_matrix broadcasts batch dimensions: (..., n, d) against (m, d).
    batched = why is None and array.ndim >= 2 and array.shape[-1] == d and 0 not in array.shape
    lc = (BAD if not np.all(np.isfinite(array)) else EXTREME if np.abs(array).max() > 1e6 else GOOD) if batched else BAD
    check_call(lambda: tt.cost_matrix(x, y), {"x": lc, "y": GOOD},
               lambda C: C.shape[-2:] == (array.shape[-2], m) and finite(C) or pytest.fail(str(C)),
               documented=documented, partners=partners)
    layer_label = lc if array is not None and array.ndim <= 3 else BAD  # the layer takes (n, m) or (B, n, m)
    check_call(lambda: tt.SinkhornLayer(epsilon=1.0)(tt.cost_matrix(x, y)), {"x": layer_label, "y": GOOD},
               lambda pi: pi.shape[-2:] == (array.shape[-2], m) or pytest.fail(str(pi)), documented=documented,
               partners=partners)


@given(st.sampled_from(["epsilon", "tol", "max_iter"]), st.sampled_from(BAD_SCALARS + [-1.0, 0, float("inf")]))
def test_torch_options(name, value):
    if name == "tol" and value == 0:
        return  # tol 0 is valid (the solve then runs to max_iter or the rounding floor)
    with pytest.raises(tokenflow.InputError) as e:
        tt.SinkhornLayer(**{name: value})
    assert e.value.key == name, str(e.value)


# ---- tokenflow's threads ---------------------------------------------------------------------------

@given(st.sampled_from(["threads", "parallel_min_pairs"]),
       st.sampled_from([v for v in BAD_SCALARS if v is not None] + [-1, 2.5, 2**70]) | st.integers(1, 8))
def test_thread_policy_takes_counts_and_refuses_the_rest(name, value):
    before = tokenflow.thread_policy()
    try:
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 8:
            assert tokenflow.set_thread_policy(**{name: value}) == before
            assert tokenflow.thread_policy()[name] == value
            return
        with pytest.raises(tokenflow.InputError) as e:
            tokenflow.set_thread_policy(**{name: value})
        assert e.value.key == name, str(e.value)
        assert tokenflow.thread_policy() == before
    finally:
        tokenflow.set_thread_policy(threads=before["threads"], parallel_min_pairs=before["parallel_min_pairs"])


# ---- every public function is in the battery ----------------------------------------------------

# Where each public name is exercised (a test above), or why it needs no drawn inputs.
BATTERY = {
    "tokenflow.sinkhorn": test_sinkhorn, "tokenflow.exact_ot": test_sinkhorn_and_exact_ot_with_a_cost_matrix,
    "tokenflow.wasserstein": test_exact_ot_and_wasserstein_on_points,
    "tokenflow.simulate": test_simulate_and_attention, "tokenflow.attention_matrix": test_simulate_and_attention,
    "tokenflow.attention_field": test_simulate_and_attention,
    "tokenflow.interaction_energy": test_simulate_and_attention, "tokenflow.metric_slope": test_simulate_and_attention,
    "tokenflow.energy_rate": test_simulate_and_attention,
    "tokenflow.gaussian": test_config_values_of_the_wrong_kind, "tokenflow.meanfield": test_config_values_of_the_wrong_kind,
    "tokenflow.stability": test_config_values_of_the_wrong_kind, "tokenflow.train": test_config_values_of_the_wrong_kind,
    "tokenflow.to_toml": test_config_values_of_the_wrong_kind, "tokenflow.config_keys": test_config_listings,
    "tokenflow.attention_kinds": test_config_listings,
    "tokenflow.SinkhornTransformer": test_couple,
    "tokenflow.set_thread_policy": test_thread_policy_takes_counts_and_refuses_the_rest,
    "tokenflow.thread_policy": test_thread_policy_takes_counts_and_refuses_the_rest,
    "tokenflow.tasks.sample": test_scalar_arguments_of_tasks_sample, "tokenflow.tasks.describe": test_config_values_of_the_wrong_kind,
    "tokenflow.tasks.check": test_tasks_check_pack_save_load, "tokenflow.tasks.pack": test_tasks_check_pack_save_load,
    "tokenflow.tasks.save": test_tasks_check_pack_save_load, "tokenflow.tasks.load": test_tasks_check_pack_save_load,
    "tokenflow.tasks.TaskPair": test_tasks_check_pack_save_load,
    "tokenflow.pot.unif": test_pot_unif_refuses_what_is_not_a_positive_count, "tokenflow.pot.dist": test_pot_samples_and_dist,
    "tokenflow.pot.sinkhorn": test_pot_histogram_solvers, "tokenflow.pot.sinkhorn2": test_pot_histogram_solvers,
    "tokenflow.pot.emd": test_pot_histogram_solvers, "tokenflow.pot.emd2": test_pot_histogram_solvers,
    **{f"tokenflow.pot.{name}": test_pot_histogram_solvers for name in
       ("sinkhorn_knopp", "sinkhorn_log", "greenkhorn", "sinkhorn_stabilized", "sinkhorn_epsilon_scaling")},
    "tokenflow.pot.empirical_sinkhorn": test_pot_samples_and_dist, "tokenflow.pot.empirical_sinkhorn2": test_pot_samples_and_dist,
    "tokenflow.pot.empirical_sinkhorn_divergence": test_pot_samples_and_dist,
    "tokenflow.pot.emd_1d": test_pot_one_dimensional, "tokenflow.pot.emd2_1d": test_pot_one_dimensional,
    "tokenflow.pot.wasserstein_1d": test_pot_one_dimensional,
    "tokenflow.pot.sinkhorn_unbalanced": test_pot_unbalanced, "tokenflow.pot.sinkhorn_unbalanced2": test_pot_unbalanced,
    "tokenflow.torch.sinkhorn": test_torch_sinkhorn, "tokenflow.torch.sinkhorn_divergence": test_torch_divergence_samples_and_cost_matrix,
    "tokenflow.torch.sinkhorn_samples": test_torch_divergence_samples_and_cost_matrix,
    "tokenflow.torch.cost_matrix": test_torch_divergence_samples_and_cost_matrix,
    "tokenflow.torch.SinkhornLayer": test_torch_divergence_samples_and_cost_matrix,
}
# Public names that take no arguments to draw: exceptions, warnings, result types, the version.
NO_INPUTS = {"InputError", "ConvergenceWarning", "NormalizationWarning", "SummationWarning", "OTResult",
             "SimulationResult", "GaussianResult", "StudyResult", "TrainResult", "WassersteinResult", "__version__",
             "ConvergenceError", "SamplesResult", "TrainingWarning", "POTDifferenceWarning"}


def public_names():
    """Every public function and class of the four faces: __all__ where a module has one, else the
    module's own public callables."""
    names = []
    for module in (tokenflow, tokenflow.tasks, tt, ot):
        listed = getattr(module, "__all__", None)
        if listed is None:
            listed = [n for n, v in vars(module).items() if not n.startswith("_") and callable(v)
                      and getattr(v, "__module__", None) == module.__name__]
        names += [f"{module.__name__}.{n}" for n in listed if n not in NO_INPUTS]
    return names


def test_every_public_function_is_in_the_battery():
    missing = [n for n in public_names() if n not in BATTERY]
    assert not missing, f"public names without a property test (add them to BATTERY): {missing}"
    for name, test in BATTERY.items():
        assert callable(test) and test.__name__.startswith("test_"), name
    assert all(inspect.isfunction(t) for t in BATTERY.values())
