"""The coupling tasks a Sinkhorn Transformer learns ([task] of ``tokenflow train``): draw their pairs
as training does, and say what distribution they come from.

A model is trained for its task's distribution and no other: one trained on the default matching
task (x_i ~ U[-1, 1]^2) is tested on pairs of that distribution, and its accuracy on other clouds
(Gaussian ones, say) can be much lower. ``describe`` says which distribution a config trains on;
train's summary.json reports it as "training_distribution".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from . import _tokenflow
from ._inputs import as_int
from .config import load


@dataclass
class TaskPair:
    """One pair of texts and its target coupling.

    x, y        points (n x d, m x d)
    a, b        weights (n, m), each summing to 1
    target      the coupling to learn, pi* (n x m), with marginals a and b
    assignment  permutation targets (matching, sorting, whitened-ot of one size): assignment[i] is
                the j with pi*_ij > 0; else None
    """

    x: np.ndarray
    y: np.ndarray
    a: np.ndarray
    b: np.ndarray
    target: np.ndarray
    assignment: Optional[np.ndarray]

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
    pairs = _tokenflow.sample_task_pairs(load(config), as_int("count", count, 0),
                                         None if seed is None else as_int("seed", seed, 0, 2**64 - 1),
                                         1 if test else 0)
    return [TaskPair(**p) for p in pairs]


def describe(config=None) -> str:
    """The distribution the task of ``config`` draws its pairs from, in one line.

    >>> import tokenflow.tasks
    >>> tokenflow.tasks.describe({"task": {"kind": "sorting", "n": 8}}).split("; ")
    ['sorting: x_i ~ U[-1, 1], n = 8', 'y_j = -1 + (2j + 1)/n (the ranks)', 'target: x_i to its rank', 'uniform weights']
    """
    return _tokenflow.describe_task(load(config))
