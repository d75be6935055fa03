"""Every docstring example of the package runs and prints what it says."""
import doctest
import importlib

import pytest

MODULES = ["tokenflow", "tokenflow.config", "tokenflow.dynamics", "tokenflow.transport", "tokenflow.plot"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.attempted > 0, f"{name} has no docstring example"
    assert result.failed == 0


def test_every_public_function_has_an_example():
    import tokenflow
    import tokenflow.plot as tp

    for f in [tokenflow.simulate, tokenflow.attention_matrix, tokenflow.sinkhorn, tokenflow.exact_ot,
              tokenflow.to_toml, tp.particles]:
        assert ">>>" in (f.__doc__ or ""), f.__name__
