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
from ._inputs import as_array, as_bool, as_int, as_path, display_path, echo, input_error
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
    """Pairs of the task of ``config``, drawn as training draws them.

    Parameters
    ----------
    config : dict, str, pathlib.Path or None, optional
        A config as for :func:`tokenflow.train` (a dict, a TOML path or None); only ``[task]`` matters.
    count : int, default 1
        How many pairs.
    seed : int, optional
        The seed; the config's ``train.seed`` when None.
    test : bool, default False
        False: pair i is entry b of step s's batch when ``i = s * train.batch + b``; True: pair i
        is test pair i (the pairs test_w1 is measured on).

    Returns
    -------
    list of TaskPair
        The pairs, with their targets (and assignments for permutation targets).

    Raises
    ------
    tokenflow.InputError
        A bad config, count or seed.

    Examples
    --------
    >>> import tokenflow.tasks
    >>> p, = tokenflow.tasks.sample({"task": {"kind": "sorting", "n": 5}})
    >>> p, np.allclose(p.target.sum(1), p.a), sorted(p.assignment.tolist())
    (TaskPair(n=5, m=5, d=1), True, [0, 1, 2, 3, 4])
    """
    pairs = _tokenflow.sample_task_pairs(load_config(config), as_int("count", count, 0),
                                         None if seed is None else as_int("seed", seed, 0, 2**64 - 1),
                                         1 if as_bool("test", test) else 0)
    return [TaskPair(**p) for p in pairs]


def describe(config=None) -> str:
    """The distribution the task of ``config`` draws its pairs from, in one line.

    Parameters
    ----------
    config : dict, str, pathlib.Path or None, optional
        A config as for :func:`tokenflow.train` (a dict, a TOML path or None); only ``[task]`` matters.

    Returns
    -------
    str
        The line train's summary.json reports as ``training_distribution``.

    Raises
    ------
    tokenflow.InputError
        A bad config.

    Examples
    --------
    >>> import tokenflow.tasks
    >>> tokenflow.tasks.describe({"task": {"kind": "sorting", "n": 8}}).split("; ")
    ['sorting: x_i ~ U[-1, 1], n = 8', 'y_j = -1 + (2j + 1)/n (the ranks)', 'target: x_i to its rank', 'uniform weights']
    """
    return _tokenflow.describe_task(load_config(config))


_PAIR_ARRAYS = {"x": (2,), "y": (2,), "target": (2,), "a": (1,), "b": (1,)}


def _sourced(source: str, key: str, detail: str) -> "_tokenflow.InputError":
    """InputError "SOURCE: KEY: DETAIL" with source and key, as the C++ checks of a pair raise it."""
    error = _tokenflow.InputError(f"{source}: {key}: {detail}")
    error.source, error.key, error.detail = source, key, detail
    return error


def _as_pair_dicts(pairs, name: str) -> list:
    """TaskPairs (or dicts with x, y, target and optionally a, b) as the dicts the core checks, each
    array converted once (_inputs.as_array): errors name the pair ("pairs[3]") and the array."""
    if isinstance(pairs, (TaskPair, dict, str, bytes)) or not hasattr(pairs, "__iter__"):
        raise input_error(name, f"must be a list of TaskPair (or of dicts with x, y, target), not "
                                f"{type(pairs).__name__} {echo(pairs)}")
    out = []
    for i, p in enumerate(pairs):
        source = f"{name}[{i}]"
        if isinstance(p, TaskPair):
            p = {"x": p.x, "y": p.y, "target": p.target, "a": p.a, "b": p.b}
        elif not isinstance(p, dict):
            raise input_error(source, f"must be a TaskPair or a dict, not {type(p).__name__} {echo(p)}")
        unknown = [k for k in p if k not in _PAIR_ARRAYS and k != "assignment"]
        if unknown:
            raise _sourced(source, str(unknown[0]), f"unknown key; a pair holds {', '.join(_PAIR_ARRAYS)}")
        arrays = {}
        for key, ndims in _PAIR_ARRAYS.items():
            try:
                arrays[key] = as_array(key, p.get(key), ndims)
            except _tokenflow.InputError as e:
                raise _sourced(source, key, e.detail) from None
        out.append(arrays)
    return out


def check(pairs, name: str = "pairs") -> List[TaskPair]:
    """The pairs checked as ``train`` checks them (the checks of a dataset's files, docs/design.md).

    Parameters
    ----------
    pairs : list of TaskPair or of dict
        The pairs (dicts with x, y, target and optionally a, b).
    name : str, default "pairs"
        The name errors give the list (``pairs[3]``).

    Returns
    -------
    list of TaskPair
        The pairs completed: a and b default to the target's marginals, assignment marks the link
        rows.

    Raises
    ------
    tokenflow.InputError
        A bad pair, named with the array at fault.

    Examples
    --------
    >>> import numpy as np, tokenflow.tasks
    >>> p, = tokenflow.tasks.check([tokenflow.tasks.TaskPair(np.zeros((2, 1)), np.ones((2, 1)),
    ...                                                        target=np.array([[0.5, 0.0], [0.25, 0.25]]))])
    >>> p.a.tolist(), p.b.tolist(), p.assignment.tolist()
    ([0.5, 0.5], [0.75, 0.25], [0, -1])
    """
    return [TaskPair(**p) for p in _tokenflow.check_task_pairs(_as_pair_dicts(pairs, name), name)]


def load(path) -> Tuple[List[TaskPair], List[TaskPair]]:
    """The pairs of a dataset folder, checked as ``tokenflow train`` checks them.

    Parameters
    ----------
    path : str or pathlib.Path
        The folder: train/*.npz and test/*.npz, or the single-file form train.npz and test.npz
        (docs/design.md).

    Returns
    -------
    tuple of (list of TaskPair, list of TaskPair)
        (pairs, test_pairs).

    Raises
    ------
    tokenflow.InputError
        A missing or bad file, named with the array at fault.

    Examples
    --------
    :func:`save`'s example reads back the folder it writes.
    """
    train, test = _tokenflow.read_task_dataset(as_path("path", path))
    return [TaskPair(**p) for p in train], [TaskPair(**p) for p in test]


def pack(pairs) -> dict:
    """The arrays of the single-file dataset form (docs/design.md) holding checked ``pairs``.

    ``np.savez(FILE, **pack(pairs))`` writes the file; it must not be np.savez_compressed
    (training seeks to each pair inside the archive's members).

    Parameters
    ----------
    pairs : list of TaskPair or of dict
        At least one pair, checked as :func:`check` does.

    Returns
    -------
    dict of str to numpy.ndarray
        x (sum n, d), y (sum m, d), target (sum n m: each pair's coupling in C order), a (sum n),
        b (sum m), and x_offsets, y_offsets (int64, pairs + 1: pair i's rows of x are
        ``x_offsets[i]:x_offsets[i + 1]``).

    Raises
    ------
    tokenflow.InputError
        A bad pair, or none.

    Examples
    --------
    >>> import tokenflow.tasks
    >>> arrays = tokenflow.tasks.pack(tokenflow.tasks.sample({"task": {"kind": "sorting", "n": 3}}, 2))
    >>> arrays["x_offsets"].tolist(), arrays["target"].shape
    ([0, 3, 6], (18,))
    """
    pairs = check(pairs, "pairs")
    if not pairs:
        raise input_error("pairs", "is empty; accepted: a list of at least one pair")
    offsets = lambda sizes: np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return {"x": np.concatenate([p.x for p in pairs]), "y": np.concatenate([p.y for p in pairs]),
            "target": np.concatenate([p.target.ravel() for p in pairs]),
            "a": np.concatenate([p.a for p in pairs]), "b": np.concatenate([p.b for p in pairs]),
            "x_offsets": offsets([len(p.x) for p in pairs]), "y_offsets": offsets([len(p.y) for p in pairs])}


def save(path, pairs, test_pairs=None, single_file: bool = False) -> None:
    """Writes a dataset folder, after checking the pairs as :func:`check` does.

    The folder must not exist or be empty (nothing is overwritten); it appears whole or not at all
    (written beside it, then renamed). A built-in task exported: ``save(DIR, sample(config, 1000),
    sample(config, 100, test=True))``.

    Parameters
    ----------
    path : str or pathlib.Path
        The folder to write.
    pairs : list of TaskPair or of dict
        The training pairs: path/train/, one ``pair_NNNNNN.npz`` a pair (np.savez: x, y, target,
        a, b in float64).
    test_pairs : list of TaskPair or of dict, optional
        The test pairs: path/test/.
    single_file : bool, default False
        True: the single-file form for large datasets instead, path/train.npz and path/test.npz,
        each every pair of its part in one np.savez archive (:func:`pack`), which training reads a
        pair at a time.

    Returns
    -------
    None

    Raises
    ------
    tokenflow.InputError
        A bad pair, or a folder that exists and is not empty.

    Examples
    --------
    >>> import tempfile, os, tokenflow.tasks
    >>> d = os.path.join(tempfile.mkdtemp(), "sorting")
    >>> config = {"task": {"kind": "sorting", "n": 5}}
    >>> tokenflow.tasks.save(d, tokenflow.tasks.sample(config, 3), tokenflow.tasks.sample(config, 2, test=True))
    >>> train, test = tokenflow.tasks.load(d)
    >>> len(train), len(test), train[0]
    (3, 2, TaskPair(n=5, m=5, d=1))
    """
    target = os.fsdecode(as_path("path", path))  # str; undecodable bytes kept as surrogate escapes
    single_file = as_bool("single_file", single_file)
    if test_pairs is None:
        raise input_error("test_pairs", "is required: a dataset holds training and test pairs (tokenflow.tasks.load "
                                        "and train read both); accepted: a list of at least one pair")
    parts = [("train", check(pairs, "pairs")), ("test", check(test_pairs, "test_pairs"))]
    for (part, part_pairs), name in zip(parts, ("pairs", "test_pairs")):
        if not part_pairs:
            raise input_error(name, f"is empty; a dataset's {part} part needs at least one pair")
    d = {p.x.shape[1] for _, part_pairs in parts for p in part_pairs}
    if len(d) > 1:
        raise input_error("test_pairs", f"has points of dimension {parts[1][1][0].x.shape[1]}, the training pairs "
                                        f"{parts[0][1][0].x.shape[1]}; accepted: one dimension for every pair")
    shown = display_path(target)
    if os.path.lexists(target) and (not os.path.isdir(target) or os.listdir(target)):
        raise _sourced(shown, "path", "exists and is not an empty folder (nothing is overwritten)")
    parent = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(parent):
        raise _sourced(shown, "path", f"its parent folder {display_path(parent)} does not exist")
    try:
        staging = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(target))}.partial-", dir=parent)
    except OSError as e:  # named by the user's path, not the staging folder's
        raise type(e)(e.errno, f"cannot write the dataset {shown}: {e.strerror}", target) from None
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
        os.rename(staging, target)  # replaces an empty folder; a file or a non-empty one is refused above
    except BaseException as e:
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(e, OSError):  # a full disk, a folder made meanwhile: named by the user's path
            raise type(e)(e.errno, f"cannot write the dataset {shown}: {e.strerror}", target) from None
        raise
