"""The Gaussian closure: moment ODEs (``tokenflow gaussian``), the mean-field rate of particles to
them (``tokenflow meanfield``) and the W_2 stability of the particle flow (``tokenflow stability``)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from . import _tokenflow
from ._checks import check_status, require_finite
from ._inputs import as_callable_or_flag
from ._progress import call_with_progress
from ._repr import result_repr
from ._docstrings import shared
from .config import _append_keys_doc, load, with_keywords


def _study_parameters(command: str) -> str:
    """The numpydoc parameters of a study (meanfield, stability)."""
    return f"""
config : dict, str, pathlib.Path or None, optional
    A dict mirroring the TOML of ``tokenflow {command}``, a path to a TOML file, or None for every
    default. The keys are listed under Notes.
progress : callable, bool or None, optional
    Called as ``progress(fraction done)`` (None: a bar on a terminal; False: nothing).
**keys
    Config keys as keywords, ``_`` for ``.`` (``run_T=2``), set on top of ``config``.
"""


@dataclass
class GaussianResult:
    """What ``tokenflow gaussian`` writes, in memory.

    Attributes
    ----------
    times : numpy.ndarray of shape (F,)
        The frame times: times.npy.
    means : numpy.ndarray of shape (F, d)
        The means: means.npy.
    covs : numpy.ndarray of shape (F, d, d)
        The covariances: covs.npy.
    summary : dict
        summary.json (same keys and values; only wall_seconds differs).
    """

    times: np.ndarray
    means: np.ndarray
    covs: np.ndarray
    summary: dict = field(repr=False)

    def __repr__(self) -> str:
        return result_repr("GaussianResult", {"times": self.times, "covs": self.covs}, self.summary,
                           ("status", "t_final", "blowup_time"))

    @property
    def status(self) -> str:
        """How the run ended, ``summary["status"]``.

        Returns
        -------
        str
            "blowup", "converged", "horizon" or "stalled" (dopri5 could not go on; a
            ConvergenceWarning was issued).
        """
        return self.summary["status"]

    @property
    def blowup_time(self) -> Optional[float]:
        """The refined singular time, ``summary["blowup_time"]``.

        Returns
        -------
        float or None
            The blow-up time when the status is "blowup", else None.
        """
        return self.summary["blowup_time"]


def gaussian(config=None, progress=None, **keys) -> GaussianResult:
    """Solve the moment ODEs of the Gaussian closure, as ``tokenflow gaussian`` does.

    Started from ``N(mean, cov)`` (``[init]``), an attention with a Gaussian closure (softmax, l2,
    linear, sinkhorn; docs/design.md section 1) keeps the measure Gaussian, and its mean and
    covariance solve ``dm/dt = Gamma(m), dS/dt = M S + S M^T``. Runs without the GIL; Ctrl-C stops
    it (KeyboardInterrupt). The same config gives the same numbers as the CLI, to the last digit.

    Parameters
    ----------
    config : dict, str, pathlib.Path or None, optional
        A dict mirroring the TOML of ``tokenflow gaussian``, a path to a TOML file, or None for every
        default. The keys are listed under Notes.
        (simulate's keys; ``run.integrator`` defaults to dopri5; ``run.converge_tol``,
        ``run.grid_frames``).
    progress : callable, bool or None, optional
        Called as ``progress(t, T, steps)`` after every step (None: a bar on a terminal; False:
        nothing).
    **keys
        Config keys as keywords, ``_`` for ``.`` (``run_T=2``), set on top of ``config``.

    Returns
    -------
    GaussianResult
        Times, means and covariances per frame, and the summary (``status`` "blowup",
        "converged", "horizon" or "stalled"; the blow-up time and its closed-form prediction).

    Raises
    ------
    tokenflow.InputError
        A bad key or value, an attention without a Gaussian closure (sigmoid, masks), or initial
        moments whose rates overflow.
    FloatingPointError
        A non-finite result outside a blow-up, or a failed run.

    Warns
    -----
    RuntimeWarning
        The CLI's warnings (the covariance left the PSD cone).
    tokenflow.ConvergenceWarning
        A dopri5 run that stalls (status "stalled").

    Examples
    --------
    Softmax with Q = K = I blows up at ``t* = 1 / lambda_max(S0^1/2 (A + A^T) S0^1/2) = 1/sqrt(2)``:

    >>> import tokenflow
    >>> r = tokenflow.gaussian({"run": {"T": 2.0}})
    >>> r.status, round(r.blowup_time, 6), round(r.summary["predicted_blowup_time"], 6)
    ('blowup', 0.707107, 0.707107)
    >>> r.times.shape[0] == r.means.shape[0] == r.covs.shape[0], r.covs.shape[1:]
    (True, (2, 2))

    With K = -Q of rank one the covariance collapses onto a line (rank 2 -> 1):

    >>> r = tokenflow.gaussian({"attention": {"Q": [[1.0, 0.5], [0.0, 0.0]], "K": [[-1.0, -0.5], [0.0, 0.0]]},
    ...                         "run": {"T": 1e6}})
    >>> r.status, r.summary["final"]["rank"], r.summary["predicted_limit"]["rank"]
    ('converged', 1, 1)
    """
    out = call_with_progress(_tokenflow.gaussian, as_callable_or_flag("progress", progress), "gaussian", lambda t, T, steps: t / T if T > 0 else 1.0,
                             lambda t, T, steps: f"t = {t:.4g} of {T:.4g}",
                             load(with_keywords(config, "gaussian", "gaussian", keys)))
    summary = out["summary"]
    check_status(summary, "gaussian")
    # Finite for every status: a step that overflows is rolled back (blowup) or status "failed".
    require_finite("gaussian", times=out["times"], means=out["means"], covs=out["covs"])
    for message in out["warnings"]:
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    return GaussianResult(times=out["times"], means=out["means"], covs=out["covs"], summary=summary)


@dataclass
class StudyResult:
    """A study's table and its summary.json.

    Attributes
    ----------
    table : dict of str to numpy.ndarray or list
        The columns of the study's CSV file.
    summary : dict
        summary.json.
    """

    table: dict
    summary: dict = field(repr=False)

    def __repr__(self) -> str:
        rows = len(next(iter(self.table.values()), []))
        return result_repr("StudyResult", {}, self.summary, ("command", "status"),
                           (f"rows={rows}", f"columns=[{', '.join(self.table)}]"))


@shared(parameters=_study_parameters("meanfield"))
def meanfield(config=None, progress=None, **keys) -> StudyResult:
    """Particles against the moment ODE as n grows, as ``tokenflow meanfield`` does.

    For each n of ``[meanfield] ns`` and each of ``seeds`` samples of ``N(mean, cov)``, the particle
    flow runs to ``run.T`` (default 0.1, one rk4 step) and its Gaussian fit is compared with the
    moment ODE. Same numbers as the CLI to the last digit (but the seconds). Runs without the GIL;
    Ctrl-C stops it.

    Parameters
    ----------
    {{parameters}}

    Returns
    -------
    StudyResult
        ``table``: the columns of meanfield.csv (n, sample, seed, status, mean_error, cov_error,
        bures_wasserstein, their ``_from_sample`` variants, seconds); ``summary["slope"]``: the
        fitted log-log slope of the Bures-Wasserstein error (theory: -1/2).

    Raises
    ------
    tokenflow.InputError
        A bad key or value, or an attention without a Gaussian closure.
    FloatingPointError
        A non-finite error.

    Examples
    --------
    >>> import tokenflow
    >>> r = tokenflow.meanfield({"meanfield": {"ns": [64, 256], "seeds": 2}})
    >>> r.table["n"].tolist(), r.table["status"]
    ([64, 64, 256, 256], ['finished', 'finished', 'finished', 'finished'])
    >>> r.summary["theory_slope"], bool(r.summary["slope"] < 0)
    (-0.5, True)
    """
    out = call_with_progress(_tokenflow.meanfield, as_callable_or_flag("progress", progress), "meanfield", lambda f: f, lambda f: "",
                             load(with_keywords(config, "meanfield", "meanfield", keys)))
    require_finite("meanfield", **{k: v for k, v in out["table"].items() if isinstance(v, np.ndarray)})
    return StudyResult(table=out["table"], summary=out["summary"])


@shared(parameters=_study_parameters("stability"))
def stability(config=None, progress=None, **keys) -> StudyResult:
    """``W_2(mu_t, nu_t) / W_2(mu_0, nu_0)`` for two nearby initial measures, as ``tokenflow stability``.

    Same numbers as the CLI to the last digit. Runs without the GIL; Ctrl-C stops it.

    Parameters
    ----------
    {{parameters}}

    Returns
    -------
    StudyResult
        ``table``: the columns of stability.csv (t, w2, ratio, w2_over_delta); ``summary``: the
        growth constant (the largest ratio) and the growth rate.

    Raises
    ------
    tokenflow.InputError
        A bad key or value.
    FloatingPointError
        A failed run or a non-finite distance.

    Examples
    --------
    >>> import tokenflow
    >>> r = tokenflow.stability({"init": {"n": 64}, "run": {"T": 0.5, "dt": 0.05}})
    >>> r.summary["method"], r.table["t"].round(12).tolist()[:3], r.table["ratio"][0]
    ('exact', [0.0, 0.05, 0.1], 1.0)
    >>> r.summary["growth_constant"] == r.table["ratio"].max()
    True
    """
    out = call_with_progress(_tokenflow.stability, as_callable_or_flag("progress", progress), "stability", lambda f: f, lambda f: "",
                             load(with_keywords(config, "stability", "stability", keys)))
    check_status(out["summary"], "stability")
    require_finite("stability", **{k: v for k, v in out["table"].items() if isinstance(v, np.ndarray)})
    return StudyResult(table=out["table"], summary=out["summary"])


_append_keys_doc(gaussian, "gaussian")
_append_keys_doc(meanfield, "meanfield")
_append_keys_doc(stability, "stability")
