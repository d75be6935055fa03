#!/usr/bin/env bash
# `pip install .` (pyproject.toml, setuptools) into a fresh virtual environment, with the module from
# an already configured build folder; the installed package imports and computes from another folder.
set -euo pipefail
build_dir=$(realpath "$1"); source_dir=$(realpath "$2")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
version=$(sed -n 's/^project(tokenflow VERSION \([0-9.]*\).*/\1/p' "$source_dir/CMakeLists.txt")
grep -q "^version = \"$version\"" "$source_dir/pyproject.toml" || { echo "pyproject.toml's version is not $version"; exit 1; }
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
(cd "$source_dir" && TOKENFLOW_BUILD_DIR="$build_dir" "$work/venv/bin/pip" install -q --no-build-isolation --no-deps \
   --no-index --disable-pip-version-check .)
cd "$work"
"$work/venv/bin/python" - <<PY
import numpy as np
import tokenflow
assert tokenflow.__file__.startswith("$work/venv/"), tokenflow.__file__
assert tokenflow.__version__ == "$version", tokenflow.__version__
a = np.full(3, 1 / 3)
r = tokenflow.sinkhorn(a=a, b=a, M=1.0 - np.eye(3), epsilon=0.05)
assert abs(r.cost) < 1e-6 and r.marginal_error < 1e-6, r
print("pip install: tokenflow", tokenflow.__version__, "from", tokenflow.__file__)
PY
