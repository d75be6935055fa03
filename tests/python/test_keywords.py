"""Config keys as Python keywords: "_" for ".", set on top of the config, the same run as the dict."""
import numpy as np
import pytest

import tokenflow
from tokenflow.config import keyword_names


@pytest.mark.parametrize("command", ["simulate", "gaussian", "meanfield", "stability", "train"])
def test_every_key_but_the_layers_is_a_keyword(command):
    names = keyword_names(command)
    keys = [k["key"] for k in tokenflow.config_keys(command) if not k["key"].startswith("layers.")]
    assert sorted(names.values()) == sorted(keys)
    assert all(word.isidentifier() for word in names)


def test_keywords_give_the_run_of_the_dict():
    config = {"seed": 4, "init": {"n": 24}, "attention": {"kind": "l2", "scale": 0.5}, "run": {"T": 0.3, "dt": 0.1}}
    by_dict = tokenflow.simulate(config, progress=False)
    by_keywords = tokenflow.simulate(seed=4, init_n=24, attention_kind="l2", attention_scale=0.5, run_T=0.3,
                                     run_dt=0.1, progress=False)
    assert np.array_equal(by_dict.positions, by_keywords.positions)
    # On top of a dict (which is not changed) and of a TOML file.
    mixed = tokenflow.simulate({"seed": 4, "init": {"n": 24}, "run": {"T": 0.3, "dt": 0.1}}, attention_kind="l2",
                               attention_scale=0.5, progress=False)
    assert np.array_equal(by_dict.positions, mixed.positions)
    assert config["attention"]["scale"] == 0.5


def test_keywords_on_top_of_a_toml_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("seed = 4\n[init]\nn = 24\n[run]\nT = 0.3\ndt = 0.1\n[attention]\nscale = 9.0\n")
    r = tokenflow.simulate(path, attention_kind="l2", attention_scale=0.5, progress=False)
    expected = tokenflow.simulate({"seed": 4, "init": {"n": 24}, "attention": {"kind": "l2", "scale": 0.5},
                                   "run": {"T": 0.3, "dt": 0.1}}, progress=False)
    assert np.array_equal(r.positions, expected.positions)


def test_train_and_the_studies_take_keywords():
    r = tokenflow.train(task_kind="matching", task_n=4, model_width=8, model_layers=1, model_heads=2, model_k=4,
                        train_steps=3, train_batch=2, train_test_pairs=2, progress=False)
    assert r.summary["steps"] == 3
    g = tokenflow.gaussian(attention_kind="l2", run_T=0.5, progress=False)
    assert g.status == "horizon" and g.times[-1] == pytest.approx(0.5, abs=1e-12)  # l2 reaches T, no blow-up


@pytest.mark.parametrize("word,hint", [("beta", "attention_scale"), ("run_dtt", "run_dt"), ("num_heads", "attention_heads")])
def test_an_unknown_keyword_names_the_key(word, hint):
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{word}' \\(did you mean {hint}=\\?\\)"):
        tokenflow.simulate(**{word: 1.0})


def test_bad_values_fail_as_in_the_config():
    with pytest.raises(tokenflow.InputError, match="run.dt: must be positive"):
        tokenflow.simulate(run_dt=-1.0)
