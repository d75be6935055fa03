"""STYLE: no function in src/ is longer than 100 lines (tools/function_lengths.py, from Universal
Ctags: universal-ctags is among make test's packages)."""
import shutil
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
from function_lengths import function_lengths  # noqa: E402

pytestmark = pytest.mark.skipif(not (shutil.which("ctags-universal") or shutil.which("ctags")),
                                reason="needs universal-ctags (make test installs it)")


def test_no_function_in_src_is_over_100_lines():
    lengths = function_lengths()
    # The scan sees the library's functions (a few hundred), not an empty or failed listing.
    assert len(lengths) > 300 and any(name.endswith("gauss_average") for _, name, _, _ in lengths)
    over = [f"{path}:{line} {name} ({lines} lines)" for lines, name, path, line in lengths if lines > 100]
    assert over == [], "split these by their steps:\n" + "\n".join(over)
