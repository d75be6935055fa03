"""The coupling tasks a Sinkhorn Transformer learns ([task] of ``tokenflow train``): draw their pairs
as training does, say what distribution they come from, and read and write coupling datasets (the
user's own pairs, ``[task] kind = "dataset"``).

A model is trained for its task's distribution and no other: one trained on the default matching
task (x_i ~ U[-1, 1]^2) is tested on pairs of that distribution, and its accuracy on other clouds
(Gaussian ones, say) can be much lower. ``describe`` says which distribution a config trains on;
train's summary.json reports it as "training_distribution".
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

from . import _tokenflow
from ._inputs import as_int
from .config import load as load_config


@dataclass
class TaskPair:
    """One pair of texts and its target coupling.

    x, y        points (n x d, m x d)
    a, b        weights (n, m), each summing to 1 (None: the target's marginals, when the pair is
                checked by train, save or load)
    target      the coupling to learn, pi* (n x m), with marginals a and b
    assignment  permutation targets (matching, sorting, whitened-ot of one size): assignment[i] is
                the j with pi*_ij > 0; dataset pairs: the same for the rows with exactly one
                positive entry, -1 for the others (None when no row has one)

    A pair of one's own: ``TaskPair(x, y, target=pi)``.
    """

    x: np.ndarray
    y: np.ndarray
    a: Optional[np.ndarray] = None
    b: Optional[np.ndarray] = None
    target: Optional[np.ndarray] = None
    assignment: Optional[np.ndarray] = None

    def __repr__(self) -> str:
        return f"TaskPair(n={len(self.x)}, m={len(self.y)}, d={self.x.shape[1]})"


def sample(config=None, count: int = 1, seed: Optional[int] = None, test: bool = False) -> List[TaskPair]:
    """``count`` pairs of the task of ``config`` (a dict, a TOML path or None, as for
    :func:`tokenflow.train`; only [task] matters), drawn as training draws them.

    seed defaults to the config's train.seed. With test=False, pair i is entry b of step s's batch
    when i = s * train.batch + b; with test=True, pair i is test pair i (the pairs test_w1 is
    measured on).

    >>> import tokenflow.tasks
    >>> p, = tokenflow.tasks.sample({"task": {"kind": "sorting", "n": 5}})
    >>> p, np.allclose(p.target.sum(1), p.a), sorted(p.assignment.tolist())
    (TaskPair(n=5, m=5, d=1), True, [0, 1, 2, 3, 4])
    """
    pairs = _tokenflow.sample_task_pairs(load_config(config), as_int("count", count, 0),
                                         None if seed is None else as_int("seed", seed, 0, 2**64 - 1),
                                         1 if test else 0)
    return [TaskPair(**p) for p in pairs]


def describe(config=None) -> str:
    """The distribution the task of ``config`` draws its pairs from, in one line.

    >>> import tokenflow.tasks
    >>> tokenflow.tasks.describe({"task": {"kind": "sorting", "n": 8}}).split("; ")
    ['sorting: x_i ~ U[-1, 1], n = 8', 'y_j = -1 + (2j + 1)/n (the ranks)', 'target: x_i to its rank', 'uniform weights']
    """
    return _tokenflow.describe_task(load_config(config))


def _as_pair_dicts(pairs, name: str) -> list:
    """TaskPairs (or dicts with x, y, target and optionally a, b) as the dicts the core checks."""
    if isinstance(pairs, (TaskPair, dict)) or not hasattr(pairs, "__iter__"):
        raise TypeError(f"{name} must be a list of TaskPair, not {type(pairs).__name__}")
    out = []
    for i, p in enumerate(pairs):
        if isinstance(p, TaskPair):
            p = {"x": p.x, "y": p.y, "target": p.target, "a": p.a, "b": p.b}
        elif not isinstance(p, dict):
            raise TypeError(f"{name}[{i}] must be a TaskPair or a dict, not {type(p).__name__}")
        out.append({k: p.get(k) for k in ("x", "y", "target", "a", "b")})
    return out


def check(pairs, name: str = "pairs") -> List[TaskPair]:
    """The pairs checked as ``train`` checks them (the checks of a dataset's files, docs/design.md),
    completed: a and b default to the target's marginals, assignment marks the link rows.

    >>> import numpy as np, tokenflow.tasks
    >>> p, = tokenflow.tasks.check([tokenflow.tasks.TaskPair(np.zeros((2, 1)), np.ones((2, 1)),
    ...                                                        target=np.array([[0.5, 0.0], [0.25, 0.25]]))])
    >>> p.a.tolist(), p.b.tolist(), p.assignment.tolist()
    ([0.5, 0.5], [0.75, 0.25], [0, -1])
    """
    return [TaskPair(**p) for p in _tokenflow.check_task_pairs(_as_pair_dicts(pairs, name), name)]


def load(path) -> Tuple[List[TaskPair], List[TaskPair]]:
    """The pairs of the dataset folder ``path`` (train/*.npz and test/*.npz, or the single-file form
    train.npz and test.npz: docs/design.md), as
    (pairs, test_pairs), checked as ``tokenflow train`` checks them: an
    :class:`tokenflow.InputError` names the file and the array.
    """
    train, test = _tokenflow.read_task_dataset(os.fspath(path))
    return [TaskPair(**p) for p in train], [TaskPair(**p) for p in test]


def pack(pairs) -> dict:
    """The arrays of the single-file dataset form (docs/design.md) holding checked ``pairs``:
    x (sum n, d), y (sum m, d), target (sum n m,: each pair's coupling in C order), a (sum n,),
    b (sum m,) and x_offsets, y_offsets (int64, pairs + 1: pair i's rows of x are
    x_offsets[i]:x_offsets[i + 1]). ``np.savez(FILE, **pack(pairs))`` writes the file; it must not
    be np.savez_compressed (training seeks to each pair inside the archive's members).

    >>> import tokenflow.tasks
    >>> arrays = tokenflow.tasks.pack(tokenflow.tasks.sample({"task": {"kind": "sorting", "n": 3}}, 2))
    >>> arrays["x_offsets"].tolist(), arrays["target"].shape
    ([0, 3, 6], (18,))
    """
    pairs = check(pairs, "pairs")
    offsets = lambda sizes: np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return {"x": np.concatenate([p.x for p in pairs]), "y": np.concatenate([p.y for p in pairs]),
            "target": np.concatenate([p.target.ravel() for p in pairs]),
            "a": np.concatenate([p.a for p in pairs]), "b": np.concatenate([p.b for p in pairs]),
            "x_offsets": offsets([len(p.x) for p in pairs]), "y_offsets": offsets([len(p.y) for p in pairs])}


def save(path, pairs, test_pairs=None, single_file: bool = False) -> None:
    """Writes a dataset folder: ``pairs`` to path/train/, ``test_pairs`` (if given) to path/test/,
    one ``pair_NNNNNN.npz`` a pair (np.savez: x, y, target, a, b in float64), after checking them
    as :func:`check` does. With ``single_file``, the single-file form for large datasets instead:
    path/train.npz and path/test.npz, each every pair of its part in one np.savez archive
    (:func:`pack`), which training reads a pair at a time. The folder must not exist or be empty (nothing is overwritten); it
    appears whole or not at all (written beside it, then renamed).

    A built-in task exported: ``save(DIR, sample(config, 1000), sample(config, 100, test=True))``.

    >>> import tempfile, os, tokenflow.tasks
    >>> d = os.path.join(tempfile.mkdtemp(), "sorting")
    >>> config = {"task": {"kind": "sorting", "n": 5}}
    >>> tokenflow.tasks.save(d, tokenflow.tasks.sample(config, 3), tokenflow.tasks.sample(config, 2, test=True))
    >>> train, test = tokenflow.tasks.load(d)
    >>> len(train), len(test), train[0]
    (3, 2, TaskPair(n=5, m=5, d=1))
    """
    path = os.fspath(path)
    parts = [("train", check(pairs, "pairs"))]
    if test_pairs is not None:
        parts.append(("test", check(test_pairs, "test_pairs")))
    if os.path.lexists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise _tokenflow.InputError(f"{path}: path: exists and is not an empty folder (nothing is overwritten)")
    parent = os.path.dirname(os.path.abspath(path))
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(path))}.partial-", dir=parent)
    try:
        for part, part_pairs in parts:
            if single_file:
                np.savez(os.path.join(staging, part + ".npz"), **pack(part_pairs))
                continue
            os.mkdir(os.path.join(staging, part))
            width = max(6, len(str(len(part_pairs) - 1)))
            for i, p in enumerate(part_pairs):
                np.savez(os.path.join(staging, part, f"pair_{i:0{width}d}.npz"), x=p.x, y=p.y, target=p.target,
                         a=p.a, b=p.b)
        os.rename(staging, path)  # replaces an empty folder; a file or a non-empty one is refused above
    except BaseException:
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
        raise
