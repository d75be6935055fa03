"""Every result type prints on one short line: the shapes of its arrays and its summary's numbers,
never the arrays (print(tokenflow.gaussian(...)) must not print hundreds of lines)."""
import numpy as np

import tokenflow

SMALL_MODEL = {"train": {"steps": 2, "batch": 2, "test_pairs": 2}, "model": {"width": 8, "layers": 1, "heads": 1, "k": 4}}


def one_short_line(result, limit=400):
    text = repr(result)
    assert "\n" not in text and len(text) <= limit, text[:1000]
    assert str(result) == text or "\n" not in str(result)
    return text


def test_every_result_type_has_a_one_line_repr():
    sim = tokenflow.simulate({"init": {"n": 3000}, "run": {"T": 0.2, "dt": 0.01, "save_every": 1}})
    assert "trajectory=21x3000x2 float64" in one_short_line(sim) and "status='finished'" in repr(sim)
    g = tokenflow.gaussian({"run": {"T": 0.5, "save_every": 1, "dt": 0.001, "integrator": "rk4"}})
    assert "covs=501x2x2 float64" in one_short_line(g)
    study = tokenflow.meanfield({"meanfield": {"ns": [8, 16], "seeds": 1}})
    assert "rows=2" in one_short_line(study)
    trained = tokenflow.train(SMALL_MODEL)
    assert "SinkhornTransformer(" in one_short_line(trained)
    x = np.random.default_rng(0).normal(size=(300, 2))
    assert "plan=300x300" in one_short_line(tokenflow.sinkhorn(x, x + 1.0, epsilon=1.0))
    one_short_line(tokenflow.exact_ot(x[:50], x[:50] + 1.0))
    one_short_line(tokenflow.wasserstein(x, x + 1.0))
