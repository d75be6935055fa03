"""POT's own tests (test/, POT 0.8.2, unchanged) run against tokenflow.pot.

`import ot` in the test files resolves to `tokenflow.pot` itself (and `ot.bregman`, `ot.lp`,
`ot.utils` to its submodules). What tokenflow.pot does not offer and the tests use only as a
reference or a helper comes from the installed POT, and only these names (HELPERS, selection.py):

    ot.backend        the `nx` fixture's conversions (numpy and torch arrays, to_numpy, dtype checks)
    ot.datasets       make_1D_gauss: the test histograms
    ot.tic, toc, toq  timers around the calls
    ot.utils.dist0    the cost matrix (i - j)^2 of a grid of bins
    ot.lp.cvx         read by a skipif decorator of test_ot.py (cvxopt's presence)

Anything else tokenflow.pot lacks is an AttributeError, so a test that calls a solver tokenflow does
not have fails rather than running POT's. The test items that need such solvers are not run
(selection.py: EXCLUDED, each with the function it needs); the items where tokenflow is deliberately
different are expected to fail (DIFFERENT, each with the reason; docs/ot.md, "From POT", lists them).

TOKENFLOW_POT_SUITE=pot runs the same selection against the installed POT itself (the reference
that tests/python/test_pot_suite.py compares with: every item POT passes must pass here).
"""
import os
import sys
import types

import pytest

sys.path.insert(0, os.path.dirname(__file__))

MODE = os.environ.get("TOKENFLOW_POT_SUITE", "tokenflow")
if MODE not in ("tokenflow", "pot"):
    raise pytest.UsageError(f"TOKENFLOW_POT_SUITE={MODE!r}: one of 'tokenflow', 'pot'")

from selection import DIFFERENT, EXCLUDED, HELPERS, listed  # noqa: E402


class _WithHelpers(types.ModuleType):
    """A view of one of tokenflow.pot's modules with the named POT helpers added."""

    def __init__(self, name, module, helpers):
        super().__init__(name, module.__doc__)
        self.__dict__["_module"], self.__dict__["_helpers"] = module, helpers

    def __getattr__(self, attr):
        helpers = self.__dict__["_helpers"]
        if attr in helpers:
            return helpers[attr]
        return getattr(self.__dict__["_module"], attr)


def _install_tokenflow_as_ot():
    import importlib

    pot = {name: importlib.import_module("ot." + name) for name in ("backend", "datasets", "utils", "lp")}
    import ot as pot_root
    helpers = {name: getattr(pot_root, name) if hasattr(pot_root, name) else pot[name]
               for name in HELPERS[""]}
    sub_helpers = {sub: {name: getattr(pot[sub], name) for name in HELPERS[sub]} for sub in ("utils", "lp")}
    for name in [n for n in sys.modules if n == "ot" or n.startswith("ot.")]:
        del sys.modules[name]  # POT's modules stay alive through `pot` and `helpers`

    import tokenflow.pot as tp
    for sub in ("utils", "lp"):
        helpers[sub] = sys.modules["ot." + sub] = _WithHelpers("ot." + sub, getattr(tp, sub), sub_helpers[sub])
    root = _WithHelpers("ot", tp, helpers)
    root.__path__ = []  # a package, so that `import ot.lp` looks its submodules up in sys.modules
    sys.modules["ot"] = root
    sys.modules["ot.backend"] = helpers["backend"]
    sys.modules["ot.datasets"] = helpers["datasets"]
    sys.modules["ot.bregman"] = tp.bregman


if MODE == "tokenflow":
    _install_tokenflow_as_ot()


def pytest_report_header(config):
    import ot
    return (f"ot is {'tokenflow.pot' if MODE == 'tokenflow' else 'POT ' + ot.__version__} "
            f"(TOKENFLOW_POT_SUITE={MODE})")


def pytest_collection_modifyitems(config, items):
    kept, dropped = [], []
    for item in items:
        key = f"{os.path.basename(str(item.fspath))}::{item.name}"
        (dropped if listed(key, EXCLUDED) else kept).append(item)
        reason = listed(key, DIFFERENT)
        if reason and MODE == "tokenflow":
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
