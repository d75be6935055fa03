"""Configs: Python dicts that mirror the TOML files of the CLI.

A dict is written out as TOML text (:func:`to_toml`) and read by the same C++ reader as
``tokenflow simulate --config FILE.toml``, so unknown keys, wrong types and bad values give the
same errors (:class:`tokenflow.InputError`, a ``ValueError``) with the same message.
"""
from __future__ import annotations

import json
import math
import os
import re

import numpy as np

from . import _tokenflow
from ._inputs import as_path, as_str, echo, input_error

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k, where: str = "config") -> str:
    if not isinstance(k, str):
        raise input_error(where, f"has the key {echo(k)} ({type(k).__name__}); accepted: string keys")
    return k if _BARE_KEY.match(k) else json.dumps(k)


def _value(v, where: str) -> str:
    if isinstance(v, np.ndarray):
        v = v.tolist()
    elif isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)  # the shortest text that reads back as the same double
    if isinstance(v, (str, os.PathLike)):
        return json.dumps(os.fspath(v))  # JSON string escapes are valid TOML basic strings
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x, where) for x in v) + "]"
    raise input_error(where, f"is a {type(v).__name__} ({echo(v)}); accepted in a config: numbers, strings, "
                             "booleans, arrays of them and tables (dicts)")


def _is_table_list(v) -> bool:
    return isinstance(v, (list, tuple)) and len(v) > 0 and all(isinstance(x, dict) for x in v)


def _emit(table: dict, path: list[str], lines: list[str]) -> None:
    where = ".".join(path) or "config"
    if not isinstance(table, dict):
        raise input_error(where, f"is a {type(table).__name__} ({echo(table)}); accepted: a table (dict)")
    for k, v in table.items():
        if not isinstance(v, dict) and not _is_table_list(v):
            lines.append(f"{_key(k, where)} = {_value(v, (where + '.' if path else '') + str(k))}")
    for k, v in table.items():
        if isinstance(v, dict):
            sub = path + [_key(k)]
            lines.append(f"[{'.'.join(sub)}]")
            _emit(v, sub, lines)
    for k, v in table.items():
        if _is_table_list(v):
            sub = path + [_key(k)]
            for item in v:
                lines.append(f"[[{'.'.join(sub)}]]")
                _emit(item, sub, lines)


def to_toml(config: dict) -> str:
    """The TOML text of a config dict: nested dicts are tables, lists of dicts arrays of tables.

    numpy arrays and scalars become TOML arrays and numbers; floats are written with enough
    digits to read back exactly.

    Parameters
    ----------
    config : dict
        A config as the functions of tokenflow take it.

    Returns
    -------
    str
        The TOML text, which the CLI's ``--config`` reads.

    Raises
    ------
    tokenflow.InputError
        Not a dict, or a value TOML cannot hold (None, a non-finite number, a non-string key).

    Examples
    --------
    >>> print(to_toml({"seed": 3, "attention": {"kind": "l2", "Q": [[1.0, 0.0], [0.0, 2.0]]},
    ...                "layers": [{"until": 0.5, "Q": [[0.0, 1.0], [1.0, 0.0]]}]}))
    seed = 3
    [attention]
    kind = "l2"
    Q = [[1.0, 0.0], [0.0, 2.0]]
    [[layers]]
    until = 0.5
    Q = [[0.0, 1.0], [1.0, 0.0]]
    <BLANKLINE>
    """
    if not isinstance(config, dict):
        raise input_error("config", f"is a {type(config).__name__} ({echo(config)}); accepted: a dict")
    lines: list[str] = []
    _emit(config, [], lines)
    return "\n".join(lines) + "\n"


def load(config) -> "_tokenflow.Config":
    """A config for the compiled core: a dict, a path to a TOML file, or None (every default).

    Errors name the source as the CLI does: the file's path, or ``config`` for a dict.

    >>> load({"run": {"T": 2.0}}).has("run.T")
    True
    """
    if config is None:
        return _tokenflow.Config()
    if isinstance(config, _tokenflow.Config):
        return config
    if isinstance(config, (str, bytes, os.PathLike)):
        return _tokenflow.Config.from_file(as_path("config", config))
    if not isinstance(config, dict):
        raise input_error("config", f"is a {type(config).__name__} ({echo(config)}); accepted: a dict, a path to "
                                    "a TOML file, or None")
    return _tokenflow.Config.from_text(to_toml(config), "config")


# The paper's names of config keys, as keywords (``simulate(beta=2)``): the error names the key.
_PAPER_KEYWORDS = {"beta": "attention_scale", "reg": "attention_epsilon", "eps": "attention_epsilon",
                   "h": "run_dt", "step": "run_dt", "num_heads": "attention_heads"}


def keyword_names(command: str) -> dict[str, str]:
    """Config keys as Python keywords: the dotted key with "_" for "." (``attention.scale`` ->
    ``attention_scale``, ``run.T`` -> ``run_T``), for every key of the command except the per-layer
    keys of ``[[layers]]`` (give those in the config).

    >>> keyword_names("simulate")["attention_scale"], keyword_names("train")["train_lr"]
    ('attention.scale', 'train.lr')
    """
    names = {k["key"].replace(".", "_"): k["key"] for k in config_keys(command) if not k["key"].startswith("layers.")}
    assert len(names) == len([k for k in config_keys(command) if not k["key"].startswith("layers.")])
    return names


def with_keywords(config, command: str, function: str, keywords: dict):
    """``config`` (a dict, a TOML path or None) with the config keys given as keywords set on top.

    >>> with_keywords({"run": {"T": 2.0}}, "simulate", "simulate", {"run_dt": 0.5, "seed": 3})
    {'run': {'T': 2.0, 'dt': 0.5}, 'seed': 3}
    """
    if not keywords:
        return config
    names = keyword_names(command)
    for word in keywords:
        if word not in names:
            import difflib

            guess = _PAPER_KEYWORDS.get(word) or next(iter(difflib.get_close_matches(word, names, 1)), None)
            hint = f" (did you mean {guess}=?)" if guess else ""
            raise TypeError(f"{function}() got an unexpected keyword argument '{word}'{hint}; config keys are "
                            f"keywords with '_' for '.', e.g. attention_scale= for attention.scale")
    if isinstance(config, _tokenflow.Config):
        raise TypeError(f"{function}(): config keys as keywords need config as a dict, a TOML path or None")
    if isinstance(config, (str, bytes, os.PathLike)):
        import tomllib

        config = tomllib.loads(load(config).to_toml())  # read (and its errors named) by the C++ reader
    elif config is not None and not isinstance(config, dict):
        load(config)  # the InputError naming what config accepts
    import copy

    merged = copy.deepcopy(config) if config else {}  # the caller's dict is not changed
    for word, value in keywords.items():
        *sections, key = names[word].split(".")
        table = merged
        for section in sections:
            table = table.setdefault(section, {})
        table[key] = value.tolist() if isinstance(value, np.ndarray) else value
    return merged


def config_keys(command: str) -> list[dict]:
    """The config keys of a command, from the same schema as the CLI's ``--help`` and ``tokenflow config``.

    Parameters
    ----------
    command : {"simulate", "gaussian", "meanfield", "stability", "train"}
        The command.

    Returns
    -------
    list of dict
        One dict a key: ``key``, ``type``, ``default``, ``choices``, ``range``, ``unit``, ``doc``.

    Raises
    ------
    tokenflow.InputError
        An unknown command.

    Examples
    --------
    >>> [k["key"] for k in config_keys("train") if k["key"].startswith("train.l")]
    ['train.lr']
    >>> next(k for k in config_keys("simulate") if k["key"] == "run.integrator")["choices"]
    ['euler', 'rk4', 'dopri5']
    """
    return _tokenflow.config_keys(as_str("command", command))


def attention_kinds() -> list[dict]:
    """The attention kinds, from the registry the CLI and the config reader use.

    Parameters
    ----------
    None

    Returns
    -------
    list of dict
        One dict a kind: ``name``; ``weights``, the weight ``w_ij`` of token j in token i's update;
        ``normalized``, whether each row of weights sums to one; ``gaussian_closure``, whether
        ``tokenflow.gaussian`` and ``meanfield`` take it.

    Examples
    --------
    >>> [k["name"] for k in attention_kinds()]
    ['softmax', 'l2', 'sinkhorn', 'sigmoid', 'linear']
    >>> [k["name"] for k in attention_kinds() if not k["gaussian_closure"]]
    ['sigmoid']
    """
    return _tokenflow.attention_kinds()


def keys_doc(command: str) -> str:
    """The config keys of a command as a docstring section (appended to the docstrings of simulate,
    gaussian, meanfield, stability and train, so that ``help()`` lists every key with its meaning).

    >>> print(keys_doc("train").splitlines()[0])
    Config keys (a dict {"section": {"key": value}} or TOML, or keywords with "_" for ".", as
    """
    lines = ['Config keys (a dict {"section": {"key": value}} or TOML, or keywords with "_" for ".", as',
             "attention_scale=2.0; docs/config.md lists them all):"]
    for k in config_keys(command):
        default = f" = {k['default']}" if k["default"] else ""
        allowed = (f", one of {k['range']}" if k.get("choices") else f", in {k['range']}") if k.get("range") else ""
        lines.append(f"    {k['key']}{default}{allowed}: {k['doc']}")
    return "\n".join(lines)


def _append_keys_doc(function, command: str):
    """Appends keys_doc(command) to the function's docstring, as its numpydoc Notes section (the key
    list a literal block, shown as written)."""
    keys = "Notes\n-----\n" + keys_doc(command).replace("lists them all):\n", "lists them all)::\n\n", 1)
    function.__doc__ = (function.__doc__ or "").rstrip() + "\n\n    " + keys.replace("\n", "\n    ") + "\n"
    return function
