"""tokenflow.pot's submodules are modules, as POT's are: importable by name, holding the subset's
names (the same objects as the top level), and naming what they hold when a name is missing."""
import importlib
import sys
import types

import pytest

import tokenflow.pot as tp

SUBMODULES = {"bregman": {"sinkhorn", "sinkhorn2", "empirical_sinkhorn", "empirical_sinkhorn2",
                          "empirical_sinkhorn_divergence"},
              "lp": {"emd", "emd2", "emd_1d", "emd2_1d", "wasserstein_1d"},
              "utils": {"dist", "unif"},
              "unbalanced": {"sinkhorn_unbalanced", "sinkhorn_unbalanced2"}}


@pytest.mark.parametrize("name", sorted(SUBMODULES))
def test_submodule_is_a_module_with_the_subset(name):
    module = importlib.import_module(f"tokenflow.pot.{name}")
    assert isinstance(module, types.ModuleType) and sys.modules[f"tokenflow.pot.{name}"] is module
    assert getattr(tp, name) is module
    assert SUBMODULES[name] <= set(module.__all__)
    for function in module.__all__:
        assert getattr(module, function) is getattr(tp, function), function  # one function, two names
        assert function in tp.__all__
    exec(f"from tokenflow.pot.{name} import {', '.join(module.__all__)}", {})
    with pytest.raises(AttributeError, match=rf"tokenflow\.pot\.{name} has no 'no_such_function'.*use POT's ot\.{name}"):
        module.no_such_function


def test_submodules_hold_names_where_pot_has_them():
    ot = pytest.importorskip("ot")
    for name in SUBMODULES:
        module = importlib.import_module(f"tokenflow.pot.{name}")
        for function in module.__all__:
            assert hasattr(getattr(ot, name), function), f"POT's ot.{name} has no {function}"


def test_every_file_of_the_package_is_a_submodule():
    # A submodule is one file python/tokenflow/pot/<name>.py: the package imports each and lists
    # the names of its __all__ at the top (as POT lists ot.lp.emd as ot.emd).
    import pkgutil
    files = {m.name for m in pkgutil.iter_modules(tp.__path__) if not m.name.startswith("_")}
    assert files >= set(SUBMODULES)
    for name in files:
        assert isinstance(getattr(tp, name), types.ModuleType)
        assert set(getattr(tp, name).__all__) <= set(tp.__all__)
