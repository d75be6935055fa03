"""tokenflow.torch is optional: `import tokenflow` never imports PyTorch, and without PyTorch
`import tokenflow.torch` fails with one line saying what to install. Runs with or without PyTorch
(a fresh interpreter in which `torch` cannot be imported stands for a machine without it)."""
import os
import subprocess
import sys


def run(code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_import_tokenflow_does_not_import_torch():
    r = run("import sys, tokenflow; print('torch' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_without_torch_the_import_error_says_what_to_install():
    r = run("import sys; sys.modules['torch'] = None\n"  # `import torch` now raises ModuleNotFoundError
            "import tokenflow\n"
            "try:\n"
            "    import tokenflow.torch\n"
            "except ImportError as e:\n"
            "    print(type(e).__name__, e, e.__cause__, e.__suppress_context__, sep='|')\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ("ImportError|tokenflow.torch needs PyTorch (Debian: apt-get install python3-torch)"
                                "|None|True")
