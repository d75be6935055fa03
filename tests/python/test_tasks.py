"""tokenflow.tasks: the pairs training draws, and the distribution they come from."""
import numpy as np
import pytest

import tokenflow
import tokenflow.tasks


@pytest.mark.parametrize("kind", ["matching", "sorting", "entropic-ot", "whitened-ot"])
def test_pairs_are_couplings_of_their_weights(kind):
    rng = np.random.default_rng()
    seed = int(rng.integers(2**31))
    config = {"task": {"kind": kind, "n": 7, "random_weights": kind in ("entropic-ot", "whitened-ot")}}
    pairs = tokenflow.tasks.sample(config, count=3, seed=seed)
    assert len(pairs) == 3
    for p in pairs:
        assert p.a.sum() == pytest.approx(1, abs=1e-15 * len(p.a)) and np.all(p.target >= 0)
        # The entropic target is a Sinkhorn plan to marginal tolerance 1e-9 (l1); the others are
        # exact plans whose masses are the weights themselves (rounding of one sum: 1e-15).
        tol = 1e-9 if kind == "entropic-ot" else 1e-15 * len(p.a)
        assert np.abs(p.target.sum(1) - p.a).sum() + np.abs(p.target.sum(0) - p.b).sum() <= tol
        if kind in ("matching", "sorting"):
            assert sorted(p.assignment.tolist()) == list(range(len(p.x)))
            assert np.all(p.target[np.arange(len(p.x)), p.assignment] == 1 / len(p.x))
    # The same seed gives the same pairs; another stream (the test pairs) others.
    again = tokenflow.tasks.sample(config, count=3, seed=seed)
    assert all(np.array_equal(p.x, q.x) and np.array_equal(p.target, q.target) for p, q in zip(pairs, again))
    test = tokenflow.tasks.sample(config, count=1, seed=seed, test=True)[0]
    assert not np.array_equal(test.x, pairs[0].x)


def test_train_reports_its_distribution():
    config = {"task": {"kind": "matching", "n": 4, "min_n": 3}, "model": {"width": 8, "layers": 1},
              "train": {"steps": 2, "batch": 2, "test_pairs": 2}}
    r = tokenflow.train(config)
    assert r.summary["training_distribution"] == tokenflow.tasks.describe(config)
    assert r.summary["training_distribution"].startswith("matching: x_i ~ U[-1, 1]^2, n ~ U{3, ..., 4}; ")
    with pytest.raises(ValueError, match="task.kind: unknown value 'sortin'"):
        tokenflow.tasks.sample({"task": {"kind": "sortin"}})
