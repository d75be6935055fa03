"""setuptools glue for `pip install .` (pyproject.toml): CMake builds the pybind11 module.

The module is built in build/pip (configured once, then incremental), or in the configured CMake
build folder named by TOKENFLOW_BUILD_DIR, for example an existing `make build` tree. The package
folder CMake assembles (python/tokenflow: the module and the pure-Python files) is what the wheel
holds.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class CMakeBuildPy(build_py):
    def run(self):
        super().run()
        build_dir = Path(os.environ.get("TOKENFLOW_BUILD_DIR", ROOT / "build" / "pip")).resolve()
        if not (build_dir / "CMakeCache.txt").exists():
            subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                            "-DTOKENFLOW_TESTS=OFF", "-DTOKENFLOW_BENCH=OFF",
                            f"-DTOKENFLOW_PYTHON_EXECUTABLE={sys.executable}"], check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "_tokenflow", "tokenflow_python_files",
                        "-j", str(os.cpu_count() or 2)], check=True)
        shutil.copytree(build_dir / "python" / "tokenflow", Path(self.build_lib) / "tokenflow", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


class BinaryDistribution(Distribution):
    """The wheel holds a compiled module: tag it for this platform and Python."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": CMakeBuildPy}, distclass=BinaryDistribution,
      options={"build": {"build_base": "build/setuptools"}})
