"""Every docstring example of the package runs and prints what it says."""
import doctest
import importlib

import pytest

MODULES = ["tokenflow", "tokenflow.config", "tokenflow.dynamics", "tokenflow.transport", "tokenflow.plot",
           "tokenflow.gaussian", "tokenflow.model", "tokenflow.tasks", "tokenflow.pot",
           "tokenflow.pot.bregman", "tokenflow.pot.lp", "tokenflow.pot.utils",
           "tokenflow.pot.unbalanced", "tokenflow.torch"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name == "tokenflow.torch":
        pytest.importorskip("torch")
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


def _numpydoc_functions():
    """The functions with numpydoc Parameters, and the classes whose docstring documents their
    constructor's parameters (tokenflow.torch.SinkhornLayer)."""
    import importlib.util
    import inspect

    import tokenflow
    import tokenflow.plot
    import tokenflow.pot.unbalanced
    import tokenflow.tasks

    objects = [getattr(tokenflow, n) for n in tokenflow.__all__]
    objects += [getattr(tokenflow.tasks, n) for n in ("sample", "describe", "check", "load", "pack", "save")]
    objects += [tokenflow.SinkhornTransformer.load, tokenflow.SinkhornTransformer.couple,
                tokenflow.pot.unbalanced.sinkhorn_unbalanced, tokenflow.pot.unbalanced.sinkhorn_unbalanced2]
    objects += [getattr(tokenflow.pot, n) for n in tokenflow.pot.__all__]
    objects += [getattr(tokenflow.plot, n) for n in tokenflow.plot.__all__]
    constructors = []
    if importlib.util.find_spec("torch") is not None:
        import tokenflow.torch
        objects += [getattr(tokenflow.torch, n) for n in tokenflow.torch.__all__]
        objects.append(tokenflow.torch.SinkhornLayer.forward)
        constructors.append(tokenflow.torch.SinkhornLayer)
    return [f for f in objects if callable(f) and (not inspect.isclass(f) or f in constructors)
            and "\nParameters\n----------" in (inspect.getdoc(f) or "")]


def test_documented_defaults_are_the_signatures():
    """A numpydoc parameter written "name : type, default X" has the default X in the signature (the
    docs show the defaults the code uses), and every parameter of the signature is documented."""
    import ast
    import inspect
    import re

    functions = _numpydoc_functions()
    assert len(functions) >= 40
    for f in functions:
        doc = inspect.getdoc(f)
        section = doc.split("\nParameters\n----------\n", 1)[1].split("\n\n", 1)[0]
        documented = {}
        for line in section.splitlines():
            m = re.match(r"^(\*{0,2}[\w, ]+?)(?: : (.*))?$", line)
            if m and not line.startswith(" "):
                default = re.search(r", default (.+)$", m.group(2) or "")
                for name in m.group(1).split(", "):
                    documented[name.lstrip("*")] = default.group(1) if default else None
        parameters = {n: p for n, p in inspect.signature(f).parameters.items() if n not in ("self", "cls")}
        assert set(parameters) <= set(documented) | ({"None"} if not parameters else set()), \
            f"{f.__qualname__}: undocumented parameters {sorted(set(parameters) - set(documented))}"
        for name, default in documented.items():
            if default is not None:
                assert ast.literal_eval(default) == parameters[name].default, \
                    f"{f.__qualname__}({name}): the docstring says default {default}, the signature {parameters[name].default!r}"
