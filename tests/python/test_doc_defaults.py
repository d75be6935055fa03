"""Every default the docs show equals the one the code uses.

Three kinds of places show defaults:
- docs/config.md, the key reference: it must be exactly what `tokenflow config --markdown` prints
  from the schemas the readers use, and the defaults a real `simulate` run reports in its
  summary.json (dtype, kind, heads, integrator, summation, sphere step) must be the ones it shows;
- prose that names a key with "(default VALUE)" (`summation_tol` (default 1e-6),
  `[meanfield] ns` (default [...])): VALUE must be that key's default in the command's schema;
- Python signatures written out in prose (`couple(x, y, a=None, ..., tol=1e-9)`): every keyword
  shown must be a parameter of that function, with that default (inspect.signature).
"""
import ast
import inspect
import json
import os
import re
import subprocess

import numpy as np
import pytest

import tokenflow
from conftest import CLI, ROOT, run_cli

DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
COMMANDS = ("simulate", "gaussian", "meanfield", "stability", "train")


def _prose(path):
    """The text of a page outside its fenced code blocks (examples there are calls, not defaults)."""
    return re.sub(r"^```.*?^```", "", path.read_text(), flags=re.MULTILINE | re.DOTALL)


def _schema_defaults():
    """{dotted key: default as the schema writes it}, over every command (the study tables override
    simulate's, so a key is looked up per command when it matters)."""
    return {c: {k["key"]: k["default"] for k in tokenflow.config_keys(c)} for c in COMMANDS}


def _literal(text: str):
    """A default as written (1e-6, [256, 1024], "f64", 'f64', True, auto) as a Python value."""
    text = text.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text.strip("\"'")


def _same_value(shown: str, default: str) -> bool:
    """Whether two writings of a default are the same value (1e-6 and 1e-06, "x" and 'x')."""
    return _literal(shown) == _literal(default)


def test_the_key_reference_is_what_the_schemas_print():
    printed = run_cli("config", "--markdown").stdout
    assert (ROOT / "docs" / "config.md").read_text() == printed, "docs/config.md is stale: run make config-docs"


def _reference_default(command: str, key: str) -> str:
    """The default docs/config.md shows for key in command's table."""
    text = (ROOT / "docs" / "config.md").read_text()
    section = text.split(f"## `tokenflow {command}`", 1)[1].split("\n## ", 1)[0]
    row = re.search(rf"^\| `{re.escape(key)}` \| [^|]+ \| `([^`]*)` \|", section, re.MULTILINE)
    assert row, f"docs/config.md: no row for {key} under tokenflow {command}"
    return row.group(1)


def test_a_run_uses_the_defaults_the_key_reference_shows(tmp_path):
    # Only init.n and run.T are set (small and short); every other key takes its default.
    run_cli("simulate", "--set", "init.n=64", "--set", "run.T=0.02", "--out", tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    used = {"dtype": summary["dtype"], "attention.kind": summary["kind"], "attention.heads": summary["heads"],
            "run.integrator": summary["integrator"], "attention.summation": summary["summation"]["mode"],
            "attention.summation_tol": summary["summation"]["tol"]}
    for key, value in used.items():
        shown = _reference_default("simulate", key)
        assert _same_value(shown, json.dumps(value)), f"docs/config.md shows {key} = {shown}; a run uses {value}"
    # gaussian: run.integrator defaults to dopri5 there (its own table says so).
    gaussian = tokenflow.gaussian({"run": {"T": 0.01}}, progress=False)
    assert _same_value(_reference_default("gaussian", "run.integrator"), json.dumps(gaussian.summary["integrator"]))


# "`KEY` (default VALUE)" or "`[section] key` ... (default VALUE)" with no other code span between.
PROSE_DEFAULT = re.compile(r"`(\[(\w+)\] )?([\w.]+)(?: = [^`]*)?`([^`()]{0,40}?)\(default (\[[^\]]*\]|[^);,]+)[);,]")


def _resolve_key(section, name, schemas):
    """(command, dotted key) of a key named in prose, or None when the name is not a config key."""
    candidates = []
    for command, keys in schemas.items():
        for key in keys:
            if (section and key == f"{section}.{name}") or key == name or (not section and key.split(".")[-1] == name):
                candidates.append((command, key))
    return candidates


def test_defaults_named_in_prose_are_the_schemas():
    schemas = _schema_defaults()
    checked = 0
    for doc in DOCS:
        for m in PROSE_DEFAULT.finditer(_prose(doc)):
            section, name, shown = m.group(2), m.group(3), m.group(5)
            candidates = _resolve_key(section, name, schemas)
            if not candidates:
                continue  # a name that is not a config key (a function argument, a CLI flag)
            assert any(_same_value(shown, schemas[c][k]) for c, k in candidates), (
                f"{doc.name}: {m.group(0)!r}: the code's default is "
                + ", ".join(f"{schemas[c][k]} ({c} {k})" for c, k in candidates))
            checked += 1
    assert checked >= 3  # design.md's summation and summation_tol, gaussian.md's meanfield ns and seeds


def _function(prefix: str, name: str):
    """The function a page names: `ot.NAME` is POT's name (tokenflow.pot), `tt.NAME` and
    `tokenflow.torch.NAME` tokenflow.torch's, `tokenflow.plot.NAME` the figures', `couple` the model's,
    a bare or `tokenflow.` name the package's. None when the package has no such function."""
    import tokenflow.plot
    import tokenflow.pot
    import tokenflow.tasks
    modules = {"ot.": tokenflow.pot, "tokenflow.pot.": tokenflow.pot, "tokenflow.plot.": tokenflow.plot,
               "tokenflow.tasks.": tokenflow.tasks, "": tokenflow, "tokenflow.": tokenflow}
    if prefix in ("tt.", "tokenflow.torch."):
        torch_module = pytest.importorskip("tokenflow.torch")
        modules[prefix] = torch_module
    if name == "couple" and prefix in ("", "model."):
        return tokenflow.SinkhornTransformer.couple
    module = modules.get(prefix)
    value = getattr(module, name, None) if module is not None else None
    return value if callable(value) and not name.startswith("_") else None


SIGNATURE = re.compile(r"`((?:[\w]+\.)*)(\w+)\(([^`()]*=[^`()]*)\)`")


def _parameters(text: str):
    """(positional names, {keyword: value text}) of a written-out signature, or None when it is a
    call (a positional argument that is not a plain name, or an ellipsis)."""
    positional, keywords = [], {}
    for part in [p.strip() for p in re.split(r",(?![^\[]*\])", text) if p.strip()]:
        if "=" in part:
            name, value = part.split("=", 1)
            keywords[name.strip()] = value.strip()
        elif re.fullmatch(r"\w+", part) and not keywords:
            positional.append(part)
        else:
            return None
    return positional, keywords


def test_signatures_written_in_the_docs_match_the_code():
    checked = 0
    for doc in DOCS:
        for m in SIGNATURE.finditer(_prose(doc)):
            function, parsed = _function(m.group(1), m.group(2)), _parameters(m.group(3))
            if function is None or parsed is None or isinstance(function, type):
                continue
            positional, keywords = parsed
            params = inspect.signature(function).parameters
            names = [p for p in params if p != "self"]
            if names[:len(positional)] != positional:
                continue  # a call with its own variable names, not the signature
            for key, shown in keywords.items():
                if shown == "...":
                    continue  # the page elides this default
                assert key in params, f"{doc.name}: {m.group(0)}: {m.group(2)} has no parameter {key}"
                default = params[key].default
                assert default is not inspect.Parameter.empty, f"{doc.name}: {m.group(0)}: {key} has no default"
                assert _same_value(shown, repr(default)), f"{doc.name}: {m.group(0)}: the code's {key} is {default!r}"
                checked += 1
    assert checked >= 10


def test_the_toml_examples_of_configs_md_run(tmp_path):
    import numpy as np
    rng = np.random.default_rng(0)
    np.save(tmp_path / "tokens.npy", rng.normal(size=(128, 2)))
    np.save(tmp_path / "positions.npy", np.sort(rng.uniform(0.0, 1.0, 128)))
    (tmp_path / "weights").mkdir()
    np.save(tmp_path / "weights" / "Q.npy", rng.normal(size=(2, 2)) / 2)
    np.save(tmp_path / "weights" / "K.npy", rng.normal(size=(2, 2)) / 2)
    blocks = re.findall(r"^```toml\n(.*?)^```", (ROOT / "docs" / "configs.md").read_text(), re.MULTILINE | re.DOTALL)
    assert len(blocks) == 5  # heads, layers, causal mask with positions, weights from files, sphere
    for k, block in enumerate(blocks):
        (tmp_path / f"example{k}.toml").write_text(block)
        out = tmp_path / f"out{k}"
        r = subprocess.run([str(CLI), "simulate", "--config", f"example{k}.toml", "--out", str(out)], cwd=tmp_path,
                           capture_output=True, text=True, env=dict(os.environ, CI="1"), timeout=600)
        assert r.returncode == 0, (k, r.stderr)
        summary = json.loads((out / "summary.json").read_text())
        assert summary["status"] == "finished", (k, summary)


def test_the_default_positions_shown_are_the_codes(tmp_path):
    # docs/config.md shows init.positions defaulting to i / n, with values in [0, 1]: a causal run
    # from a file without positions equals the run given positions i / n explicitly (bit for bit: the
    # same numbers reach the same code), and the integers 0, 1, ... are refused naming the key.
    assert _reference_default("simulate", "init.positions") == "i / n"
    n = 12
    x = np.random.default_rng().normal(size=(n, 2))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "i_over_n.npy", np.arange(n) / n)
    np.save(tmp_path / "integers.npy", np.arange(n, dtype=float))
    config = {"init": {"kind": "file", "path": str(tmp_path / "x.npy")}, "attention": {"mask": "causal"},
              "run": {"T": 0.5, "dt": 0.05}}
    default = tokenflow.simulate(config).positions
    config["init"]["positions"] = str(tmp_path / "i_over_n.npy")
    assert np.array_equal(tokenflow.simulate(config).positions, default)
    config["init"]["positions"] = str(tmp_path / "integers.npy")
    with pytest.raises(tokenflow.InputError, match=r"init.positions: entry 2 is 2; positions must lie in \[0, 1\]"):
        tokenflow.simulate(config)
