"""The particle flow dx_i/dt = Gamma_mu(x_i) (``tokenflow simulate``) and attention matrices."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from . import _tokenflow
from ._checks import check_status, require_finite, warn_summary
from ._inputs import as_array, as_callable_or_flag, as_float, as_int, as_weights
from ._progress import call_with_progress
from ._repr import result_repr
from .config import _append_keys_doc, load, with_keywords


@dataclass
class SimulationResult:
    """What ``tokenflow simulate`` writes, in memory.

    positions   final points, n x d (float64, or float32 when dtype = "f32"): positions.npy
    initial     initial points, n x d: initial.npy
    trajectory  F x n x d saved frames (initial, every run.save_every-th step, final), or None
                when run.save_every = 0: trajectory.npy
    times       the F frame times, or None: times.npy
    diagnostics the columns of diagnostics.csv (t, mean_c, eig_c, effective_rank, rank, clusters,
                energy, max_norm), each a numpy array over the initial, saved and final frames
    summary     summary.json as a dict (same keys and values; only wall_seconds differs)
    """

    positions: np.ndarray
    initial: np.ndarray
    trajectory: Optional[np.ndarray]
    times: Optional[np.ndarray]
    diagnostics: dict = field(repr=False)
    summary: dict = field(repr=False)

    def __repr__(self) -> str:
        return result_repr("SimulationResult", {"positions": self.positions, "trajectory": self.trajectory},
                           self.summary, ("status", "t_final", "steps", "n", "d"))

    @property
    def status(self) -> str:
        """"finished", "blowup" (max_i |x_i| passed run.blowup) or "stalled" (dopri5 could not go on
        before T: a ConvergenceWarning was issued; summary["reason"] says where)."""
        return self.summary["status"]


def simulate(config=None, x0=None, weights=None, positions=None, progress=None, **keys) -> SimulationResult:
    """Run the particle flow of ``tokenflow simulate``.

    config     a dict mirroring the TOML (``{"attention": {"kind": "l2"}, "run": {"T": 2}}``), a
               path to a TOML file, or None for every default. Unknown keys and bad values raise
               :class:`tokenflow.InputError` (a ValueError) with the CLI's message.
    x0         initial points (n x d array) instead of ``[init]``; weights (n) and positions (n,
               in [0, 1], for causal masks) optional, as the files of init.kind = "file".
    progress   called as progress(t, T, steps) after every step (an exception it raises stops the
               run and is raised here); None: a progress bar on stderr when it is a terminal
               (and CI is not set); False: nothing.
    **keys     config keys as keywords, "_" for "." (``attention_kind="l2", run_T=2``), set on top
               of ``config``.

    The computation runs without the GIL; Ctrl-C stops it (KeyboardInterrupt). The same config
    gives the same numbers as the CLI, to the last digit. Positions may be non-finite only with
    status "blowup"; otherwise a non-finite result, or a run that failed (the CLI's exit 1), raises
    FloatingPointError, and a dopri5 run that stalls before T warns with ConvergenceWarning.

    >>> import tokenflow
    >>> r = tokenflow.simulate({"seed": 1, "init": {"n": 64},
    ...                         "attention": {"kind": "softmax", "Q": [[1.0, 0.0], [0.0, 0.0]],
    ...                                       "K": [[-1.0, 0.0], [0.0, 0.0]]},
    ...                         "run": {"T": 0.5, "save_every": 10}})
    >>> r.positions.shape, r.trajectory.shape, r.times.round(12).tolist()
    ((64, 2), (6, 64, 2), [0.0, 0.1, 0.2, 0.3, 0.4, 0.5])
    >>> r.status, r.summary["steps"], r.summary["n"]
    ('finished', 50, 64)
    >>> x0 = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    >>> tokenflow.simulate({"run": {"T": 0.0}}, x0=x0).positions.tolist()
    [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]
    >>> tokenflow.simulate(x0=x0, attention_kind="l2", run_T=0.2, run_dt=0.1).summary["steps"]
    2
    """
    progress = as_callable_or_flag("progress", progress)
    out = call_with_progress(_tokenflow.simulate, progress, "simulate", lambda t, T, steps: t / T if T > 0 else 1.0,
                             lambda t, T, steps: f"t = {t:.4g} of {T:.4g}, {steps} steps",
                             load(with_keywords(config, "simulate", "simulate", keys)), as_array("x0", x0),
                             as_weights("weights", weights, warn=False), as_array("positions", positions, (1,)))
    columns = out["diagnostics_columns"]
    table = out["diagnostics"]
    diagnostics = {name: table[:, k] for k, name in enumerate(columns)}
    summary = out["summary"]
    check_status(summary, "simulate")
    warn_summary(summary, stacklevel=2)
    # positions and frames are finite for every status (a step that overflows is status "failed")
    require_finite("simulate", positions=out["positions"], trajectory=out["trajectory"])
    return SimulationResult(positions=out["positions"], initial=out["initial"], trajectory=out["trajectory"],
                            times=out["times"], diagnostics=diagnostics, summary=summary)


def attention_matrix(config, x, weights=None, positions=None, t: float = 0.0, head: int = 0) -> np.ndarray:
    """The n x n attention weights w_h(x_i, x_j) (rows: queries i, columns: keys j) of one head.

    The attention is read from the config's ``[attention]`` table (and ``[[layers]]``, at time
    t) exactly as ``simulate`` reads it; the matrix comes from the reference implementation
    (plain loops in float64). softmax and l2 rows sum to 1; sinkhorn's are the entropic OT plan
    divided by a_i, so with uniform weights its columns sum to 1 as well. Logits that overflow
    (a non-finite matrix) raise FloatingPointError.

    >>> import tokenflow
    >>> x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    >>> w = tokenflow.attention_matrix({"attention": {"kind": "softmax"}}, x)
    >>> w.shape, np.allclose(w.sum(axis=1), 1.0)
    ((3, 3), True)
    >>> s = tokenflow.attention_matrix({"attention": {"kind": "sinkhorn"}}, x)
    >>> np.allclose(s.sum(axis=0), 1.0, atol=1e-9), np.allclose(s.sum(axis=1), 1.0, atol=1e-9)
    (True, True)
    """
    w = _tokenflow.attention_matrix(load(config), as_array("x", x, (1, 2), allow_none=False),
                                  as_weights("weights", weights, warn=False),
                                  as_array("positions", positions, (1,)), as_float("t", t, finite=True),
                                  as_int("head", head, 0))
    require_finite("attention_matrix", weights=w)
    return w


def attention_field(config, x, weights=None, positions=None, t: float = 0.0) -> np.ndarray:
    """The velocity field Gamma_mu(x_i) = sum_h W_h V_h sum_j w_h(x_i, x_j) x_j at every token (n x d).

    mu is the measure of the tokens x (n x d) with the given weights and positions; the attention
    is read from the config's ``[attention]`` table (and ``[[layers]]``, at time t) exactly as
    ``simulate`` reads it, and the field is the one simulate integrates: the same kernel and
    summation (attention.summation), multi-head, masks and the sink, and with normalize = "sphere"
    the projection on the tangent space (pre, peri, ngpt, mix: the normalization schemes of
    docs/normalization-schemes.md; mix is sphere's field for t < attention.mix_until, pre's after). One Euler step of size dt is x + dt * attention_field(...).
    In float64 whatever the config's dtype.

    >>> import tokenflow
    >>> x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    >>> v = tokenflow.attention_field({"attention": {"kind": "softmax"}}, x)
    >>> w = tokenflow.attention_matrix({"attention": {"kind": "softmax"}}, x)
    >>> v.shape, np.allclose(v, w @ x, rtol=0, atol=1e-15)
    ((3, 2), True)
    """
    v = _tokenflow.attention_field(load(config), as_array("x", x, (1, 2), allow_none=False),
                                   as_weights("weights", weights, warn=False), as_array("positions", positions, (1,)),
                                   as_float("t", t, finite=True))
    require_finite("attention_field", field=v)
    return v


def _energy_rates(config, x, weights, t) -> dict:
    r = _tokenflow.energy_rates(load(config), as_array("x", x, (1, 2), allow_none=False),
                                as_weights("weights", weights, warn=False), as_float("t", t, finite=True))
    require_finite("energy_rates", **{k: np.array(v) for k, v in r.items()})
    return r


def interaction_energy(config, x, weights=None, t: float = 0.0) -> float:
    """The interaction energy E(mu) = 1/2 sum_ij a_i a_j exp(s_ij) of softmax attention, with
    s_ij = scale <Q x_i, K x_j> = x_j^T A x_i read from the config's ``[attention]`` (the layer
    active at time t; one head, no mask, no sink). docs/gradient-flow.md.

    >>> import tokenflow
    >>> x = np.array([[0.0, 0.0], [1.0, 0.0]])
    >>> round(tokenflow.interaction_energy({"attention": {"scale": 1.0}}, x), 6)  # (3 + e) / 8
    0.714785
    """
    return _energy_rates(config, x, weights, t)["energy"]


def metric_slope(config, x, weights=None, t: float = 0.0) -> float:
    """The metric slope |dE| of the interaction energy: |dE|^2 = sum_i |grad_{x_i} E|^2 / g_i in the
    metric g_i = a_i Z_i / c (Z_i = sum_j a_j exp(s_ij), c = |W V|_F / |A|_F), which for A
    symmetric is c sum_i a_i Z_i |A ybar_i|^2. When A is symmetric and W V = c A (c > 0) the flow is
    the gradient flow of E in that metric and dE/dt = |dE|^2 (``energy_rate``). docs/gradient-flow.md.

    >>> import tokenflow
    >>> x = np.array([[0.0, 0.0], [1.0, 0.0]])
    >>> config = {"attention": {"scale": 1.0}}
    >>> abs(tokenflow.metric_slope(config, x) ** 2 - tokenflow.energy_rate(config, x)) < 1e-15
    True
    """
    return float(np.sqrt(_energy_rates(config, x, weights, t)["slope_squared"]))


def energy_rate(config, x, weights=None, t: float = 0.0) -> float:
    """dE/dt along the flow, sum_i <grad_{x_i} E, Gamma_i> (the chain rule), at the points x.
    With V = -A (A symmetric) the flow descends E: dE/dt = -|dE|^2.

    >>> import tokenflow
    >>> x = np.array([[0.0, 0.0], [1.0, 0.5]])
    >>> config = {"attention": {"scale": 1.0, "V": -np.eye(2)}}
    >>> abs(tokenflow.energy_rate(config, x) + tokenflow.metric_slope(config, x) ** 2) < 1e-15
    True
    """
    return _energy_rates(config, x, weights, t)["rate"]


_append_keys_doc(simulate, "simulate")
