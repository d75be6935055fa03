"""Sinkhorn Transformers: training on a coupling task (``tokenflow train``) and coupling two
measures with a trained model (``tokenflow couple``)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from . import _tokenflow
from ._checks import TrainingWarning, require_finite, warn_convergence
from ._inputs import as_array, as_bool, as_callable_or_flag, as_float, as_int, as_path, as_weights
from ._progress import call_with_progress
from ._repr import result_repr
from .config import _append_keys_doc, load, with_keywords

# Model.couple's defaults are the library's CoupleOptions (include/tokenflow/model.hpp), as `tokenflow couple`'s.
_COUPLE = _tokenflow.CoupleOptions()


class SinkhornTransformer:
    """A trained Sinkhorn Transformer (the contents of model.bin).

    Two transformer encoders compute ``Q(mu, x_i)`` and ``K(nu, y_j)``; the coupling of (mu, nu) is
    the entropic OT plan for the cost ``-<Q_i, K_j> / sqrt(k)`` (include/tokenflow/model.hpp). Made
    by :func:`tokenflow.train` (``TrainResult.model``) or :meth:`load`.

    Attributes
    ----------
    config : dict
        The ``[model]`` values (d, width, layers, heads, k, mlp_ratio, epsilon, ...).
    config_toml : str
        The whole configuration it was trained with (TOML text).
    params : numpy.ndarray
        The flat parameters (a copy), in the order of model.bin's tensors.
    marginal_penalty : float or None
        The final layer's marginal penalty rho as :meth:`couple` solves with it: ``config``'s, or
        the learned one when the model was trained with ``learn_marginal_penalty``; None: balanced.
    """

    def __init__(self, core: "_tokenflow.SinkhornTransformer"):
        self._core = core

    @classmethod
    def load(cls, path) -> "SinkhornTransformer":
        """Read model.bin (written by ``tokenflow train`` or :meth:`save`).

        Parameters
        ----------
        path : str or pathlib.Path
            The model file.

        Returns
        -------
        SinkhornTransformer
            The model.

        Raises
        ------
        tokenflow.InputError
            A corrupt or foreign file, named in the message.

        Examples
        --------
        >>> import os, tempfile, tokenflow
        >>> model = tokenflow.train({"task": {"n": 4}, "model": {"width": 8, "layers": 1, "k": 4},
        ...                          "train": {"steps": 2, "batch": 2, "test_pairs": 2}}).model
        >>> path = os.path.join(tempfile.mkdtemp(), "model.bin")
        >>> model.save(path)
        >>> np.array_equal(tokenflow.SinkhornTransformer.load(path).params, model.params)
        True
        """
        return cls(_tokenflow.SinkhornTransformer.load(as_path("path", path)))

    def save(self, path) -> None:
        """Write model.bin (atomically), readable by :meth:`load` and ``tokenflow couple --model``.

        Parameters
        ----------
        path : str or pathlib.Path
            The file to write (replaced when it exists).

        Raises
        ------
        tokenflow.InputError
            A path that is not a str, bytes or os.PathLike.
        RuntimeError
            The file cannot be written (its folder does not exist, no permission, a full disk),
            naming it.
        """
        self._core.save(as_path("path", path))

    def couple(self, x, y, a=None, b=None, unrolled: bool = _COUPLE.unrolled, tol: float = _COUPLE.tol,
               max_iter: int = _COUPLE.max_iter) -> np.ndarray:
        """The predicted coupling pi (n x m) of the measures (x, a) and (y, b).

        By default the plan is the entropic-OT plan of the learned cost ``c_ij = -<Q_i, K_j> /
        sqrt(k)`` at the model's epsilon, solved until its l1 marginal error is below tol. Either
        way it is exactly the plan.npy of ``tokenflow couple --model model.bin --x x.npy --y
        y.npy`` (with ``--unrolled``, ``--tol``, ``--max-iter``).

        Parameters
        ----------
        x : array_like of shape (n, d)
            Points of the first measure, in the model's dimension d.
        y : array_like of shape (m, d)
            Points of the second measure.
        a : array_like of shape (n,), optional
            Weights of x (normalized here); uniform when None.
        b : array_like of shape (m,), optional
            Weights of y; uniform when None.
        unrolled : bool, default False
            True: the training-time plan of ``model.sinkhorn_iters`` unrolled iterations (columns
            sum to b, rows only approximately to a).
        tol : float, default 1e-9
            The l1 marginal error of the converged plan.
        max_iter : int, default 100000
            Iterations of the converged solve.

        Returns
        -------
        numpy.ndarray of shape (n, m)
            The plan.

        Raises
        ------
        tokenflow.InputError
            Bad arrays, or a model epsilon too small for its costs.
        FloatingPointError
            A plan that is not a coupling (non-finite entries, columns off b: the CLI's status
            "failed").

        Warns
        -----
        tokenflow.ConvergenceWarning
            The converged solve stopped at max_iter.

        Examples
        --------
        >>> import tokenflow
        >>> model = tokenflow.train({"task": {"n": 4}, "model": {"width": 8, "layers": 1, "k": 4},
        ...                          "train": {"steps": 2, "batch": 2, "test_pairs": 2}}).model
        >>> x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
        >>> plan = model.couple(x, 2 * x + 1)
        >>> plan.shape, np.allclose(plan.sum(axis=0), 1 / 3)
        ((3, 3), True)
        """
        plan, error, iterations, converged = self._core.couple(
            as_array("x", x, (2,), allow_none=False), as_array("y", y, (2,), allow_none=False),
            as_weights("a", a, warn=False), as_weights("b", b, warn=False), as_bool("unrolled", unrolled),
            as_float("tol", tol), as_int("max_iter", max_iter))
        if not unrolled and not converged:
            warn_convergence(f"couple: Sinkhorn stopped at max_iter {max_iter} with marginal error {error:g} above "
                             f"tol {tol:g}: the plan is not a coupling to that tolerance", stacklevel=2)
        return plan

    @property
    def config(self) -> dict:
        return self._core.config

    @property
    def config_toml(self) -> str:
        return self._core.config_toml

    @property
    def params(self) -> np.ndarray:
        return self._core.params

    @property
    def marginal_penalty(self) -> Optional[float]:
        return self._core.marginal_penalty

    def __repr__(self) -> str:
        c = self.config
        return (f"SinkhornTransformer(d={c['d']}, width={c['width']}, layers={c['layers']}, heads={c['heads']}, "
                f"k={c['k']}, parameters={self.params.size})")


@dataclass
class TrainResult:
    """What ``tokenflow train`` writes, in memory.

    Attributes
    ----------
    model : SinkhornTransformer
        The trained model, its last state (model.bin; with status "failed", its last finite state).
    metrics : dict of str to numpy.ndarray
        The columns of metrics.csv: step, loss, test_w1, seconds, test_loss, test_accuracy (NaN
        accuracy for tasks without a permutation target).
    summary : dict
        summary.json (same keys and values; wall_seconds, train_seconds and pairs_per_second are
        timings).
    best_model : SinkhornTransformer or None
        The model of the lowest test loss (best_model.bin; ``summary["best_step"]`` and
        ``summary["best_test_loss"]`` say when and what).
    """

    model: SinkhornTransformer
    metrics: dict = field(repr=False)
    summary: dict = field(repr=False)
    best_model: Optional[SinkhornTransformer] = field(default=None, repr=False)

    def __repr__(self) -> str:
        return result_repr("TrainResult", {}, self.summary, ("status", "steps", "test_w1", "test_accuracy"),
                           (f"model={self.model!r}",))


def train(config=None, progress: Optional[Callable[[int, int, float, float], object]] = None, pairs=None,
          test_pairs=None, **keys) -> TrainResult:
    """Train a Sinkhorn Transformer on a coupling task, as ``tokenflow train`` does.

    Training runs without the GIL; Ctrl-C stops it (KeyboardInterrupt). It is bit-reproducible:
    the same config gives the same parameters, metrics and summary as the CLI, to the last digit
    (timings aside), with any number of threads.

    Parameters
    ----------
    config : dict, str, pathlib.Path or None, optional
        A dict mirroring the TOML of ``tokenflow train`` (dtype, ``[task]``, ``[model]``,
        ``[train]``; docs/design.md section 2), a path to a TOML file, or None for every default.
        The keys are listed under Notes. A dataset on disk is ``{"task": {"kind": "dataset",
        "path": DIR}}`` (:func:`tokenflow.tasks.load` reads one).
    progress : callable, bool or None, optional
        Called after every step as ``progress(step, steps, loss, pairs_per_second)``; an exception
        it raises stops training and is raised here. None: a progress bar on stderr when it is a
        terminal (and CI is not set); False: nothing.
    pairs : list of tokenflow.tasks.TaskPair or of dict, optional
        The user's own training pairs (dicts with x, y, target and optionally a, b): the task is
        then "dataset" (the default ``[task]`` kind when pairs are given) and batches are drawn
        from them.
    test_pairs : list of tokenflow.tasks.TaskPair or of dict, optional
        The pairs the test metrics come from (with ``pairs``).
    **keys
        Config keys as keywords, ``_`` for ``.`` (``train_steps=200``), set on top of ``config``.

    Returns
    -------
    TrainResult
        The trained model, the columns of metrics.csv and the summary (test W_1 between couplings
        on X x Y, accuracy, and their untrained and independent-coupling references).

    Raises
    ------
    tokenflow.InputError
        A bad key or value, or a bad pair (named as "pairs[3]" with the array).

    Warns
    -----
    tokenflow.TrainingWarning
        As it happens: a test loss far above its best; a non-finite training loss or gradient,
        which stops the run with summary status "failed" and its "reason" (the result is still
        returned: ``model`` is the last finite state, ``best_model`` the model of the lowest test
        loss).

    Examples
    --------
    >>> import tokenflow
    >>> r = tokenflow.train({"task": {"kind": "matching", "n": 4},
    ...                      "model": {"width": 8, "layers": 1, "heads": 2, "k": 4},
    ...                      "train": {"steps": 20, "batch": 4, "test_pairs": 4}})
    >>> r.summary["steps"], r.metrics["step"][-1], r.model.config["width"]
    (20, 20, 8)
    >>> bool(r.summary["test_w1"] < r.summary["test_w1_untrained"])
    True
    """
    from .tasks import _as_pair_dicts

    given = (None if pairs is None else _as_pair_dicts(pairs, "pairs"),
             None if test_pairs is None else _as_pair_dicts(test_pairs, "test_pairs"))
    def on_warning(line: str) -> None:
        warnings.warn(line, TrainingWarning, stacklevel=5)

    out = call_with_progress(lambda source, callback: _tokenflow.train(source, callback, *given, on_warning),
                             as_callable_or_flag("progress", progress), "train",
                             lambda step, steps, loss, rate: step / steps,
                             lambda step, steps, loss, rate: f"step {step} of {steps}, loss {loss:.4g}",
                             load(with_keywords(config, "train", "train", keys)))
    require_finite("train (the parameters diverged)", params=out["model"].params)
    return TrainResult(model=SinkhornTransformer(out["model"]), metrics=out["metrics"],
                       summary=out["summary"], best_model=SinkhornTransformer(out["best_model"]))


_append_keys_doc(train, "train")
