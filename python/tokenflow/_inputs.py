"""The one place where the public functions convert their arguments (arrays, integers, numbers).

Every array a user hands to tokenflow goes through :func:`as_array`, every integer through
:func:`as_int` and every real number through :func:`as_float` before it reaches the C++ module,
so that a bad argument is a :class:`tokenflow.InputError` (a ValueError) naming the argument, its
type, dtype or shape, and what is accepted, never pybind11's "incompatible function arguments"
TypeError, a silent cast (complex to real) or an allocation error. python/src/arrays.hpp checks
the shapes again on the C++ side and refuses sizes that do not fit in memory.

>>> import numpy as np, tokenflow
>>> tokenflow.sinkhorn(np.ones((2, 2)) * 1j, np.ones((2, 2)))
Traceback (most recent call last):
...
tokenflow.InputError: x: has dtype complex128; accepted: real numbers (float or integer dtypes)
"""
from __future__ import annotations

import numbers
from typing import Optional, Sequence

import numpy as np

from . import _tokenflow

# The range of a C int (int32), which the C++ side takes for counts and indices.
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
# At most this many characters of a user's value are echoed in a message (then "...").
ECHO_LIMIT = 80


def echo(value) -> str:
    """repr(value), cut to about ECHO_LIMIT characters (then "...") so that no message echoes a
    huge value whole."""
    try:
        text = repr(value)
    except Exception:  # a value whose repr raises is named by its type
        text = f"<{type(value).__name__}>"
    return text if len(text) <= ECHO_LIMIT else text[:ECHO_LIMIT] + "..."


def input_error(name: str, detail: str) -> "_tokenflow.InputError":
    """tokenflow.InputError "NAME: DETAIL" with the attributes the C++ errors carry."""
    error = _tokenflow.InputError(f"{name}: {detail}")
    error.source, error.key, error.detail = "", name, detail
    return error


def _torch_tensor(value) -> bool:
    return type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach")


def as_array(name: str, value, ndims: Sequence[int] = (1, 2), allow_none: bool = True) -> Optional[np.ndarray]:
    """`value` as a C-contiguous float64 array with one of the dimensions in `ndims` (None passes
    when allow_none). Refused with InputError: complex, boolean, string and object dtypes; ragged
    lists; torch tensors that require grad or live on a GPU; other dimensions."""
    if value is None:
        if allow_none:
            return None
        raise input_error(name, "is required (an array of real numbers), not None")
    if _torch_tensor(value):
        if getattr(value, "requires_grad", False):
            raise input_error(name, "is a torch tensor that requires grad; tokenflow's functions take "
                                    "numbers, not graphs: pass .detach() (tokenflow.torch has the "
                                    "differentiable Sinkhorn)")
        if str(getattr(value, "device", "cpu")) != "cpu":
            raise input_error(name, f"is a torch tensor on {value.device}; pass .cpu()")
        value = value.detach().numpy()
    try:
        with np.errstate(all="ignore"):
            array = np.asarray(value)
    except ValueError as e:  # numpy >= 1.24: an inhomogeneous (ragged) nested list
        raise input_error(name, "is a ragged list (rows of different lengths); accepted: a rectangular "
                                "array of real numbers") from e
    if array.dtype == object:
        raise input_error(name, "is a ragged list or holds objects that are not numbers "
                                f"({echo(value)}); accepted: a rectangular array of real numbers")
    if array.dtype.kind not in "iuf":
        raise input_error(name, f"has dtype {array.dtype}; accepted: real numbers (float or integer dtypes)")
    if array.ndim not in ndims:
        accepted = {(1,): "a 1-D array", (2,): "a 2-D array (rows x columns)",
                    (1, 2): "a 2-D array (rows x columns; a 1-D array is one column)"}[tuple(ndims)]
        raise input_error(name, f"must be {accepted}, not of shape {array.shape}")
    return np.ascontiguousarray(array, dtype=np.float64)


def as_int(name: str, value, low: int = INT_MIN, high: int = INT_MAX) -> int:
    """`value` (a Python or numpy integer, not a bool) as an int in [low, high], else InputError
    naming the range (a C int's by default)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise input_error(name, f"must be an integer, not {type(value).__name__} {echo(value)}")
    value = int(value)
    if not low <= value <= high:
        raise input_error(name, f"is {echo(value)}, outside the accepted range [{low}, {high}]")
    return value


def as_float(name: str, value) -> float:
    """`value` (a real number: Python, numpy or a 0-d array) as a float, else InputError (complex
    numbers and strings are refused, never cast)."""
    if isinstance(value, (bool, np.bool_)) or isinstance(value, (str, bytes)):
        raise input_error(name, f"must be a real number, not {type(value).__name__} {echo(value)}")
    if isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real):
        raise input_error(name, f"must be a real number, not complex {echo(value)}")
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        return float(value)
    if not isinstance(value, numbers.Real):
        raise input_error(name, f"must be a real number, not {type(value).__name__} {echo(value)}")
    try:
        return float(value)
    except OverflowError as e:  # an int beyond the range of a double
        raise input_error(name, f"is {echo(value)}, out of the range of a double (about 1.8e308)") from e
