"""Every docstring example of the package runs and prints what it says."""
import doctest
import importlib

import pytest

MODULES = ["tokenflow", "tokenflow.config", "tokenflow.dynamics", "tokenflow.transport", "tokenflow.plot",
           "tokenflow.gaussian", "tokenflow.model", "tokenflow.tasks", "tokenflow.pot",
           "tokenflow.pot.bregman", "tokenflow.pot.lp", "tokenflow.pot.utils",
           "tokenflow.pot.unbalanced"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.attempted > 0, f"{name} has no docstring example"
    assert result.failed == 0


def test_every_public_function_has_an_example():
    import inspect

    import tokenflow
    import tokenflow.plot as tp

    # The directory readers need a CLI output directory: their examples are prose, and
    # test_plot.py runs them on directories written by the CLI.
    on_cli_output = {"read_simulation", "simulation_dir", "gaussian_dir"}
    functions = [getattr(tokenflow, n) for n in tokenflow.__all__] + [getattr(tp, n) for n in tp.__all__]
    for f in functions:
        if inspect.isfunction(f) and f.__name__ not in on_cli_output:
            assert ">>>" in (f.__doc__ or ""), f"{f.__module__}.{f.__name__} has no runnable example"


@pytest.mark.parametrize("command", ["simulate", "gaussian", "meanfield", "stability", "train"])
def test_every_config_key_is_in_its_functions_docstring(command):
    import tokenflow

    doc = getattr(tokenflow, command).__doc__
    for k in tokenflow.config_keys(command):
        if k["doc"]:  # hidden keys (written by tokenflow itself) have none
            assert f"    {k['key']}" in doc and k["doc"] in doc, k["key"]
