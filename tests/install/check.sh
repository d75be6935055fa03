#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds and runs a consumer project against it.
set -euo pipefail
build_dir=$1; source_dir=$2
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir/tests/install" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/consumer" -j2 >/dev/null
"$work/consumer/consumer"
test -x "$work/prefix/bin/tokenflow"
# The Python package lands where Debian's python3 looks from any folder, under /usr/local as under /usr.
site=$(cd "$work/prefix" && ls -d lib/python3.*/dist-packages)
test -f "$work/prefix/$site/tokenflow/__init__.py"
/usr/bin/python3 -c "import sys; assert '/usr/local/$site' in sys.path and '/usr/$site' in sys.path, sys.path"
PYTHONPATH="$work/prefix/$site" /usr/bin/python3 -c "import tokenflow, tokenflow.pot.bregman; assert tokenflow.__version__"
# The package is portable: its interface names no tuning flag (the consumer above was compiled with
# its own, default, flags and shared Eigen objects with the library).
! grep -n -e '-march' -e 'prefer-vector-width' "$work"/prefix/lib*/cmake/tokenflow/*.cmake
grep -q 'EIGEN_MAX_ALIGN_BYTES=64' "$work"/prefix/lib*/cmake/tokenflow/tokenflowTargets.cmake
