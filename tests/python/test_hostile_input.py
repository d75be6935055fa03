"""Hostile input files through Python: a deeply nested TOML file, a fifo, /dev/zero or a directory
given as a path raises tokenflow.InputError naming the file (a ValueError), without crashing the
interpreter and without blocking. Each check runs in a child interpreter with a time limit, so that
a crash or a hang fails the test instead of taking pytest down with it."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tokenflow

PACKAGE_ROOT = str(Path(tokenflow.__file__).resolve().parent.parent)


def run_python(code, timeout=60):
    """Runs `code` in a fresh interpreter that imports tokenflow; returns the CompletedProcess."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def expect_input_error(call, path, timeout=60):
    """`call` (Python source using `path`) raises tokenflow.InputError naming `path`."""
    r = run_python(f"""
        import tokenflow
        path = {str(path)!r}
        try:
            {call}
        except tokenflow.InputError as e:
            print("InputError:", e)
        else:
            print("no error")
        """, timeout=timeout)
    assert r.returncode == 0, f"the interpreter died (exit {r.returncode}): {r.stderr[-2000:]}"
    assert r.stdout.startswith("InputError:"), r.stdout + r.stderr
    assert str(path) in r.stdout, r.stdout
    return r.stdout


def model_bin(config: str) -> bytes:
    """A model.bin holding `config` and no tensors, sealed with its checksum (FNV-1a 64)."""
    import struct

    body = b"TFMODEL1" + struct.pack("<Q", len(config)) + config.encode() + struct.pack("<QQ", 0, 0)
    h = 0xCBF29CE484222325
    for byte in body:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return body + struct.pack("<Q", h)


@pytest.mark.parametrize("kind", ["header", "arrays", "dotted"])
def test_deep_toml_raises_input_error(tmp_path, kind):
    text = {
        "header": "[" + ".".join(["a"] * 50000) + "]\nx = 1\n",
        "arrays": "a = " + "[" * 100000 + "1" + "]" * 100000 + "\n",
        "dotted": ".".join(["a"] * 50000) + " = 1\n",
    }[kind]
    path = tmp_path / "deep.toml"
    path.write_text(text)
    message = expect_input_error("tokenflow.simulate(path)", path, timeout=30)
    assert "levels deep" in message
    expect_input_error("tokenflow.gaussian(path)", path, timeout=30)
    # The config embedded in model.bin goes through the same checks.
    model = tmp_path / "model.bin"
    model.write_bytes(model_bin(text))
    expect_input_error("tokenflow.SinkhornTransformer.load(path)", model, timeout=30)


def test_deep_toml_in_process(tmp_path):
    """In this interpreter too (after the child checks above showed it does not crash)."""
    path = tmp_path / "deep.toml"
    path.write_text("[" + ".".join(["a"] * 50000) + "]\n")
    with pytest.raises(tokenflow.InputError, match="levels deep"):
        tokenflow.simulate(path)


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory"])
def test_special_files_raise_input_error_without_blocking(tmp_path, kind):
    if kind == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
    elif kind == "dev_zero":
        path = Path("/dev/zero")
    else:
        path = tmp_path
    for call in ("tokenflow.simulate(path)", "tokenflow.SinkhornTransformer.load(path)",
                 "tokenflow.simulate({'init': {'kind': 'file', 'path': path}})"):
        message = expect_input_error(call, path, timeout=30)
        assert "not a regular file" in message, message


def test_model_file_promising_more_than_it_holds(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(model_bin("[model]\nd = 2\nwidth = 8\nheads = 2\nk = 4\nlayers = 100000\n"))
    assert path.stat().st_size < 600
    with pytest.raises(tokenflow.InputError, match="bytes left in the file"):
        tokenflow.SinkhornTransformer.load(path)
    path.write_bytes(model_bin("[model]\nd = 2\nwidth = 8\nheads = 2\nk = 4\nlayers = 200000000\n"))
    with pytest.raises(tokenflow.InputError, match="model.layers"):
        tokenflow.SinkhornTransformer.load(path)


# ---- arguments of the public functions: one conversion (tokenflow/_inputs.py) -------------------
# Every public function that takes arrays, listed with a call whose array argument `name` is
# replaced by the hostile value. A refusal is tokenflow.InputError whose key is the argument's name.
@pytest.fixture(scope="module")
def tiny_model():
    return tokenflow.train({"task": {"kind": "matching", "n": 4},
                            "model": {"width": 8, "layers": 1, "heads": 2, "k": 4},
                            "train": {"steps": 1, "batch": 2, "test_pairs": 2}}, progress=False).model


def array_calls(model):
    x = np.random.default_rng().normal(size=(5, 2))
    w = np.full(5, 0.2)
    cfg = {"init": {"n": 5}, "run": {"T": 0.02}}
    return {
        "sinkhorn.x": ("x", lambda v: tokenflow.sinkhorn(v, x, progress=False)),
        "sinkhorn.a": ("a", lambda v: tokenflow.sinkhorn(x, x, a=v, progress=False)),
        "sinkhorn.M": ("M", lambda v: tokenflow.sinkhorn(a=w, b=w, M=v, progress=False)),
        "exact_ot.y": ("y", lambda v: tokenflow.exact_ot(x, v)),
        "exact_ot.b": ("b", lambda v: tokenflow.exact_ot(x, x, b=v)),
        "wasserstein.x": ("x", lambda v: tokenflow.wasserstein(v, x)),
        "wasserstein.positions_y": ("positions_y", lambda v: tokenflow.wasserstein(x, x, positions_x=w, positions_y=v)),
        "simulate.x0": ("x0", lambda v: tokenflow.simulate(cfg, x0=v, progress=False)),
        "simulate.weights": ("weights", lambda v: tokenflow.simulate(cfg, x0=x, weights=v, progress=False)),
        "attention_matrix.x": ("x", lambda v: tokenflow.attention_matrix({}, v)),
        "attention_matrix.positions": ("positions", lambda v: tokenflow.attention_matrix({}, x, positions=v)),
        "attention_field.x": ("x", lambda v: tokenflow.attention_field({}, v)),
        "attention_field.weights": ("weights", lambda v: tokenflow.attention_field({}, x, weights=v)),
        "interaction_energy.x": ("x", lambda v: tokenflow.interaction_energy({}, v)),
        "metric_slope.weights": ("weights", lambda v: tokenflow.metric_slope({}, x, weights=v)),
        "energy_rate.x": ("x", lambda v: tokenflow.energy_rate({}, v)),
        "couple.x": ("x", lambda v: model.couple(v, x)),
        "couple.b": ("b", lambda v: model.couple(x, x, b=v)),
    }


HOSTILE_ARRAYS = {
    "complex": (lambda: np.ones((5, 2)) * (1 + 1j), "dtype complex128"),
    "complex_1d": (lambda: np.ones(5, dtype=np.complex64), "dtype complex64"),
    "ragged": (lambda: [[1.0, 2.0], [3.0]], "ragged list"),
    "strings": (lambda: np.array(["a", "b"]), "dtype <U1"),
    "bool": (lambda: np.ones((5, 2), dtype=bool), "dtype bool"),
    "objects": (lambda: [object(), object()], "not numbers"),
}


@pytest.mark.parametrize("hostile", sorted(HOSTILE_ARRAYS))
def test_every_public_function_refuses_hostile_arrays_naming_the_argument(tiny_model, hostile):
    make, expected = HOSTILE_ARRAYS[hostile]
    for label, (name, call) in array_calls(tiny_model).items():
        with pytest.raises(tokenflow.InputError) as e:
            call(make())
        assert e.value.key == name, (label, str(e.value))
        assert str(e.value).startswith(f"{name}: ") and expected in str(e.value), (label, str(e.value))
        assert "accepted" in str(e.value) or "not numbers" in str(e.value), (label, str(e.value))


def test_torch_tensors_that_require_grad_are_refused_and_plain_ones_accepted(tiny_model):
    torch = pytest.importorskip("torch")
    for label, (name, call) in array_calls(tiny_model).items():
        if name in ("x", "x0", "y"):
            with pytest.raises(tokenflow.InputError, match="requires grad") as e:
                call(torch.ones(5, 2, dtype=torch.float64, requires_grad=True))
            assert e.value.key == name, label
    x = torch.randn(5, 2, dtype=torch.float64)
    assert tokenflow.exact_ot(x, x).cost == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("value", [2**70, -2**40, 2**31, 1.5, "10", True, None])
def test_integer_arguments_out_of_c_int_range_or_not_integers_are_input_errors(tiny_model, value):
    x = np.random.default_rng().normal(size=(4, 2))
    calls = {
        "sinkhorn": lambda: tokenflow.sinkhorn(x, x, max_iter=value, progress=False),
        "wasserstein": lambda: tokenflow.wasserstein(x, x, method="sinkhorn", max_iter=value, progress=False),
        "couple": lambda: tiny_model.couple(x, x, max_iter=value),
    }
    for label, call in calls.items():
        with pytest.raises(tokenflow.InputError) as e:
            call()
        assert e.value.key == "max_iter", (label, str(e.value))
        if isinstance(value, int) and not isinstance(value, bool):
            assert "[-2147483648, 2147483647]" in str(e.value), str(e.value)
        else:
            assert "must be an integer" in str(e.value), str(e.value)
    with pytest.raises(tokenflow.InputError, match=r"head.*\[0, 2147483647\]"):
        tokenflow.attention_matrix({}, x, head=2**70)


def test_real_number_arguments_refuse_complex_and_strings():
    x = np.random.default_rng().normal(size=(4, 2))
    for kwargs, name in [({"epsilon": 0.1 + 1j}, "epsilon"), ({"tol": "1e-9"}, "tol"), ({"epsilon": 10**400}, "epsilon")]:
        with pytest.raises(tokenflow.InputError) as e:
            tokenflow.sinkhorn(x, x, progress=False, **kwargs)
        assert e.value.key == name, str(e.value)
    with pytest.raises(tokenflow.InputError, match=r"^p: must be a real number, not complex"):
        tokenflow.wasserstein(x, x, p=2j)


def test_attention_matrix_on_three_million_tokens_names_the_n_by_n_size():
    x = np.zeros((3_000_000, 2))
    with pytest.raises(tokenflow.InputError) as e:
        tokenflow.attention_matrix({}, x)
    message = str(e.value)
    assert e.value.key == "x" and "3000000 x 3000000 attention matrix" in message, message
    assert " needs " in message and "more than" in message and "memory" in message, message


def test_echoed_values_are_capped_in_python_messages():
    huge = "k" * (10 << 20)
    with pytest.raises(tokenflow.InputError) as e:
        tokenflow.simulate({huge: 1})
    assert len(str(e.value)) < 400 and "..." in str(e.value)
    with pytest.raises(tokenflow.InputError) as e:
        tokenflow.simulate({"attention": {"kind": huge}})
    assert len(str(e.value)) < 400 and "..." in str(e.value)


def test_task_samples_beyond_memory_name_the_count():
    with pytest.raises(tokenflow.InputError, match=r"^count: count = 2147483647 pairs of up to 16 tokens needs .* of memory"):
        tokenflow.tasks.sample({"task": {"kind": "matching"}}, count=2**31 - 1)
    with pytest.raises(tokenflow.InputError, match=r"^count: is 1180591620717411303424, outside the accepted range"):
        tokenflow.tasks.sample({"task": {"kind": "matching"}}, count=2**70)


# ---- non-finite is not blow-up (docs/design.md section 3) ------------------------------------------
@pytest.mark.parametrize("integrator", ["euler", "rk4", "dopri5"])
@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_overflowing_simulate_and_stability_raise_floating_point_error_naming_the_step(integrator, dtype):
    config = {"dtype": dtype, "init": {"n": 12}, "attention": {"scale": 1e308},
              "run": {"T": 0.05, "integrator": integrator}}
    with pytest.raises(FloatingPointError, match=r"^simulate failed: step 1 \(t = 0 to .*the attention velocity"):
        tokenflow.simulate(config, progress=False)
    if integrator != "dopri5" and dtype == "f64":  # stability: fixed steps, float64
        with pytest.raises(FloatingPointError, match=r"^stability failed: the flow of mu_0: step 1"):
            tokenflow.stability(config, progress=False)


def test_a_genuine_blowup_keeps_finite_arrays():
    # Linear attention: |x| grows like 1 / (t* - t); the run stops past run.blowup with finite arrays.
    r = tokenflow.simulate({"init": {"n": 16}, "attention": {"kind": "linear"},
                            "run": {"T": 100.0, "dt": 0.01, "blowup": 1e6, "save_every": 1}}, progress=False)
    assert r.summary["status"] == "blowup" and r.summary["t_final"] < 100.0
    assert np.all(np.isfinite(r.positions)) and np.all(np.isfinite(r.trajectory))
