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
from ._docstrings import shared
from .config import _append_keys_doc, load, with_keywords

# The parameters of the functions of one configuration and one point cloud (numpydoc).
_POINTS = """
config : dict, str or pathlib.Path
    A simulate config (dict or TOML path); its ``[attention]`` table is used.
x : array_like of shape (n, d)
    The tokens.
weights : array_like of shape (n,), optional
    Their weights (normalized to sum 1); uniform when None.
"""
_TIME = """
t : float, default 0.0
    The time that selects the layer.
"""


@dataclass
class SimulationResult:
    """What ``tokenflow simulate`` writes, in memory.

    Attributes
    ----------
    positions : numpy.ndarray of shape (n, d)
        The final points (float64, or float32 when ``dtype = "f32"``): positions.npy.
    initial : numpy.ndarray of shape (n, d)
        The initial points: initial.npy.
    trajectory : numpy.ndarray of shape (F, n, d) or None
        The saved frames (initial, every ``run.save_every``-th step, final), or None when
        ``run.save_every = 0``: trajectory.npy.
    times : numpy.ndarray of shape (F,) or None
        The frame times, or None: times.npy.
    diagnostics : dict of str to numpy.ndarray
        The columns of diagnostics.csv (t, mean_c, eig_c, effective_rank, rank, clusters, energy,
        max_norm), each over the initial, saved and final frames.
    summary : dict
        summary.json (same keys and values; only wall_seconds differs).
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
        """How the run ended, ``summary["status"]``.

        Returns
        -------
        str
            "finished"; "blowup" (``max_i |x_i|`` passed run.blowup); or "stalled" (dopri5 could
            not go on before T: a ConvergenceWarning was issued; ``summary["reason"]`` says where).
        """
        return self.summary["status"]


def simulate(config=None, x0=None, weights=None, positions=None, progress=None, **keys) -> SimulationResult:
    """Run the particle flow of ``tokenflow simulate``.

    The computation runs without the GIL; Ctrl-C stops it (KeyboardInterrupt). The same config
    gives the same numbers as the CLI, to the last digit.

    Parameters
    ----------
    config : dict, str, pathlib.Path or None, optional
        A dict mirroring the TOML (``{"attention": {"kind": "l2"}, "run": {"T": 2}}``), a path to a
        TOML file, or None for every default. The keys are listed under Notes.
    x0 : array_like of shape (n, d), optional
        Initial points instead of ``[init]``.
    weights : array_like of shape (n,), optional
        Positive weights of the initial points (normalized to sum 1); uniform when None.
    positions : array_like of shape (n,), optional
        Positions in [0, 1] for causal masks (default ``i / n`` in input order).
    progress : callable, bool or None, optional
        Called as ``progress(t, T, steps)`` after every step (an exception it raises stops the run
        and is raised here); None: a progress bar on stderr when it is a terminal (and CI is not
        set); False: nothing.
    **keys
        Config keys as keywords, ``_`` for ``.`` (``attention_kind="l2", run_T=2``), set on top of
        ``config``.

    Returns
    -------
    SimulationResult
        The final positions, the frames (with ``run.save_every`` > 0), the diagnostics per frame and
        the summary (``status`` "finished", "blowup" or "stalled").

    Raises
    ------
    tokenflow.InputError
        An unknown key or a bad value (a ValueError, with the CLI's message naming the key).
    FloatingPointError
        A non-finite result outside a blow-up, or a run that failed (the CLI's exit 1).

    Warns
    -----
    tokenflow.ConvergenceWarning
        A dopri5 run that stalls before T.

    Examples
    --------
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


@shared(points=_POINTS)
def attention_matrix(config, x, weights=None, positions=None, t: float = 0.0, head: int = 0) -> np.ndarray:
    """The n x n attention weights ``w_h(x_i, x_j)`` (rows: queries i, columns: keys j) of one head.

    The attention is read from the config's ``[attention]`` table (and ``[[layers]]``, at time
    t) exactly as ``simulate`` reads it; the matrix comes from the reference implementation
    (plain loops in float64). softmax and l2 rows sum to 1; sinkhorn's are the entropic OT plan
    divided by ``a_i``, so with uniform weights its columns sum to 1 as well.

    Parameters
    ----------
    {{points}}
    positions : array_like of shape (n,), optional
        Positions in [0, 1] for a causal mask.
    t : float, default 0.0
        The time that selects the layer of ``[[layers]]``.
    head : int, default 0
        Which head (0-based).

    Returns
    -------
    numpy.ndarray of shape (n, n)
        The weights, float64.

    Raises
    ------
    tokenflow.InputError
        A bad config, array or index.
    FloatingPointError
        Logits that overflow (a non-finite matrix).

    Examples
    --------
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


@shared(points=_POINTS)
def attention_field(config, x, weights=None, positions=None, t: float = 0.0) -> np.ndarray:
    """The velocity field ``Gamma_mu(x_i) = sum_h W_h V_h sum_j w_h(x_i, x_j) x_j`` at every token.

    mu is the measure of the tokens x with the given weights and positions; the attention is read
    from the config's ``[attention]`` table (and ``[[layers]]``, at time t) exactly as ``simulate``
    reads it, and the field is the one simulate integrates: the same kernel and summation
    (``attention.summation``), multi-head, masks and the sink, and with ``normalize = "sphere"``
    the projection on the tangent space (pre, peri, ngpt, mix: the normalization schemes of
    docs/normalization-schemes.md; mix is sphere's field for ``t < attention.mix_until``, pre's
    after). One Euler step of size dt is ``x + dt * attention_field(...)``.

    Parameters
    ----------
    {{points}}
    positions : array_like of shape (n,), optional
        Positions in [0, 1] for a causal mask.
    t : float, default 0.0
        The time (selects the layer, and mix's scheme).

    Returns
    -------
    numpy.ndarray of shape (n, d)
        The velocity of every token, in float64 whatever the config's dtype.

    Raises
    ------
    tokenflow.InputError
        A bad config or array.
    FloatingPointError
        A non-finite field.

    Examples
    --------
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


@shared(points=_POINTS, time=_TIME)
def interaction_energy(config, x, weights=None, t: float = 0.0) -> float:
    """The interaction energy ``E(mu) = 1/2 sum_ij a_i a_j exp(s_ij)`` of softmax attention.

    ``s_ij = scale <Q x_i, K x_j> = x_j^T A x_i`` is read from the config's ``[attention]`` (the
    layer active at time t; one head, no mask, no sink). See docs/gradient-flow.md.

    Parameters
    ----------
    {{points}}
    {{time}}

    Returns
    -------
    float
        E(mu).

    Raises
    ------
    tokenflow.InputError
        A bad config or array (or an attention the energy is not defined for).

    Examples
    --------
    >>> import tokenflow
    >>> x = np.array([[0.0, 0.0], [1.0, 0.0]])
    >>> round(tokenflow.interaction_energy({"attention": {"scale": 1.0}}, x), 6)  # (3 + e) / 8
    0.714785
    """
    return _energy_rates(config, x, weights, t)["energy"]


@shared(points=_POINTS, time=_TIME)
def metric_slope(config, x, weights=None, t: float = 0.0) -> float:
    """The metric slope ``|dE|`` of the interaction energy.

    ``|dE|^2 = sum_i |grad_{x_i} E|^2 / g_i`` in the metric ``g_i = a_i Z_i / c`` (``Z_i = sum_j
    a_j exp(s_ij)``, ``c = |W V|_F / |A|_F``), which for A symmetric is ``c sum_i a_i Z_i |A
    ybar_i|^2``. When A is symmetric and ``W V = c A`` (c > 0) the flow is the gradient flow of E
    in that metric and ``dE/dt = |dE|^2`` (``energy_rate``). See docs/gradient-flow.md.

    Parameters
    ----------
    {{points}}
    {{time}}

    Returns
    -------
    float
        ``|dE|`` at the points x.

    Raises
    ------
    tokenflow.InputError
        A bad config or array.

    Examples
    --------
    >>> import tokenflow
    >>> x = np.array([[0.0, 0.0], [1.0, 0.0]])
    >>> config = {"attention": {"scale": 1.0}}
    >>> abs(tokenflow.metric_slope(config, x) ** 2 - tokenflow.energy_rate(config, x)) < 1e-15
    True
    """
    return float(np.sqrt(_energy_rates(config, x, weights, t)["slope_squared"]))


@shared(points=_POINTS, time=_TIME)
def energy_rate(config, x, weights=None, t: float = 0.0) -> float:
    """``dE/dt`` along the flow, ``sum_i <grad_{x_i} E, Gamma_i>`` (the chain rule), at the points x.

    With ``V = -A`` (A symmetric) the flow descends E: ``dE/dt = -|dE|^2``.

    Parameters
    ----------
    {{points}}
    {{time}}

    Returns
    -------
    float
        ``dE/dt`` at the points x.

    Raises
    ------
    tokenflow.InputError
        A bad config or array.

    Examples
    --------
    >>> import tokenflow
    >>> x = np.array([[0.0, 0.0], [1.0, 0.5]])
    >>> config = {"attention": {"scale": 1.0, "V": -np.eye(2)}}
    >>> abs(tokenflow.energy_rate(config, x) + tokenflow.metric_slope(config, x) ** 2) < 1e-15
    True
    """
    return _energy_rates(config, x, weights, t)["rate"]


_append_keys_doc(simulate, "simulate")
