"""The one place where the public functions convert their arguments (arrays, weights, integers,
numbers, flags, names, paths, configs, torch tensors).

Every argument a user hands to ``tokenflow``, ``tokenflow.tasks``, ``tokenflow.torch`` or
``tokenflow.pot`` goes through one of the functions below before it reaches the C++ module or a
solver, so that a bad argument is a :class:`tokenflow.InputError` (a ValueError) naming the
argument, what it got (type, dtype, shape or value) and what is accepted: never pybind11's
"incompatible function arguments" TypeError, numpy's or torch's own errors, a silent cast (complex
to real, a string to True) or an allocation that fails (MemoryError) after the fact.
python/src/arrays.hpp checks the shapes again on the C++ side and refuses sizes that do not fit in
memory.

>>> import numpy as np, tokenflow
>>> tokenflow.sinkhorn(np.ones((2, 2)) * 1j, np.ones((2, 2)))
Traceback (most recent call last):
...
tokenflow.InputError: x: has dtype complex128; accepted: real numbers (float or integer dtypes)
"""
from __future__ import annotations

import math
import numbers
import os
import warnings
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


# ---- memory: the estimator of the C++ side (tokenflow/memory_budget.hpp), asked before allocating

def check_memory(name: str, nbytes: float, what: str) -> None:
    """InputError on `name` when holding `nbytes` at once (`what`: "a 10^6 x 10^6 cost matrix")
    would need more than the memory limit (the smallest of physical memory, the control group's
    limit, ulimit -v and TOKENFLOW_MEMORY_LIMIT), before anything is allocated: the C++ side's one
    estimate and message (check_memory, as every command and arrays.hpp's check_fits_in_memory)."""
    _tokenflow.check_memory(name, float(nbytes), what)


# ---- arrays ------------------------------------------------------------------------------------

def _torch_tensor(value) -> bool:
    return type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach")


def _accepted(ndims: Sequence[int]) -> str:
    return {(0,): "a number", (1,): "a 1-D array", (2,): "a 2-D array (rows x columns)",
            (1, 2): "a 2-D array (rows x columns; a 1-D array is one column)",
            (2, 3): "a 2-D array (n x m) or a batch of them (B x n x m)"}.get(
                tuple(ndims), f"an array of {' or '.join(map(str, ndims))} dimensions")


def real_array(name: str, value, ndims: Optional[Sequence[int]] = (1, 2), nonempty: bool = True,
               what: str = "real numbers") -> np.ndarray:
    """`value` as a numpy array of a real dtype (float16/32/64 or integers; its own dtype kept,
    any layout), with one of the dimensions in `ndims` (None: any) and, when `nonempty`, no axis
    of length 0. Refused with InputError naming `name`: complex, boolean, string and object
    dtypes; ragged lists; torch tensors that require grad or live on a GPU; other dimensions."""
    if _torch_tensor(value):
        if getattr(value, "requires_grad", False):
            raise input_error(name, "is a torch tensor that requires grad; tokenflow's functions take "
                                    "numbers, not graphs: pass .detach() (tokenflow.torch has the "
                                    "differentiable Sinkhorn)")
        if str(getattr(value, "device", "cpu")) != "cpu":
            raise input_error(name, f"is a torch tensor on {value.device}; pass .cpu()")
        if getattr(value, "is_complex", lambda: False)():
            raise input_error(name, f"has dtype {value.dtype}; accepted: {what} (float or integer dtypes)")
        try:
            value = value.detach().numpy()
        except (TypeError, RuntimeError) as e:  # bfloat16 and other dtypes numpy lacks
            raise input_error(name, f"is a torch tensor of dtype {value.dtype}; accepted: {what} "
                                    "(float16/32/64 or integer dtypes)") from e
    if isinstance(value, (str, bytes)):
        raise input_error(name, f"is a {type(value).__name__} ({echo(value)}); accepted: an array of {what}")
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy's own warnings (ComplexWarning, ragged lists) become errors below
            array = np.asarray(value)
    except (ValueError, TypeError, OverflowError) as e:  # numpy >= 1.24: an inhomogeneous (ragged) nested list
        raise input_error(name, "is a ragged list (rows of different lengths) or not an array of numbers; "
                                f"accepted: a rectangular array of {what}") from e
    except MemoryError as e:
        raise input_error(name, "does not fit in memory as an array") from e
    if array.dtype == object:
        raise input_error(name, "is a ragged list or holds objects that are not numbers "
                                f"({echo(value)}); accepted: a rectangular array of {what}")
    if array.dtype.kind not in "iuf":
        raise input_error(name, f"has dtype {array.dtype}; accepted: {what} (float or integer dtypes)")
    if ndims is not None and array.ndim not in ndims:
        raise input_error(name, f"must be {_accepted(ndims)}, not of shape {array.shape}")
    if nonempty and array.ndim > 0 and 0 in array.shape:
        raise input_error(name, f"is empty (shape {array.shape}); accepted: {_accepted(ndims or (array.ndim,))} "
                                "with at least one entry along each axis")
    return array


def as_array(name: str, value, ndims: Sequence[int] = (1, 2), allow_none: bool = True,
             nonempty: bool = True) -> Optional[np.ndarray]:
    """`value` as a C-contiguous float64 array (:func:`real_array`'s checks; None passes when
    allow_none). float16, float32 and integers are converted exactly (integers beyond 2^53 round);
    Fortran-ordered and strided arrays are copied once."""
    if value is None:
        if allow_none:
            return None
        raise input_error(name, "is required (an array of real numbers), not None")
    array = real_array(name, value, ndims, nonempty)
    if array.dtype != np.float64 or not array.flags.c_contiguous:
        check_memory(name, 8.0 * array.size, f"a float64 copy of shape {array.shape}")
    return np.ascontiguousarray(array, dtype=np.float64)


def _unit_scale(w: np.ndarray) -> np.ndarray:
    """w (float64, finite, >= 0) times the power of two that brings its largest entry into [0.5, 1):
    exact for every normal entry, so that a sum of huge weights (1e308, 1e308) cannot overflow."""
    top = float(w.max()) if w.size else 0.0
    if top == 0.0 or 0.5 <= top < 1.0:
        return w
    return np.ldexp(w, -math.frexp(top)[1])


def weight_tolerance(dtype, n: int) -> float:
    """How far weights rounded to `dtype` that were normalized in their own precision can sum from
    1: each of the n entries is off by at most eps/2 of itself, and a sum in that precision adds
    n eps (a float32 unif(n) sums to 1 within n * 6e-8, not within float64's 1e-16); at least 1e-9."""
    eps = np.finfo(dtype).eps if np.dtype(dtype).kind == "f" else np.finfo(np.float64).eps
    return max(1e-9, 2.0 * max(n, 1) * float(eps))


def weight_total(w: np.ndarray) -> float:
    """The sum of float64 weights w (finite, >= 0), computed without overflow (inf only when the
    true sum exceeds the largest double)."""
    scaled = _unit_scale(w)
    if scaled is w:
        return float(np.sum(w))
    exponent = math.frexp(float(w.max()))[1]
    total = float(np.sum(scaled))
    return math.ldexp(total, exponent) if math.frexp(total)[1] + exponent <= 1024 else math.inf


def as_weights(name: str, value, size: Optional[int] = None, allow_none: bool = True, warn: bool = True,
               stacklevel: int = 3, scale: bool = True) -> Optional[np.ndarray]:
    """Weights (a histogram): a 1-D array of finite, nonnegative reals with a positive sum (of
    `size` entries when given), as float64 scaled by a power of two so that its sum is finite
    (exact: [1e308, 1e308] is accepted as [0.5, 0.5] times 2^k). The caller divides by the sum
    (the library does). When `warn`, weights whose sum is off 1 by more than the rounding of their
    own dtype (:func:`weight_tolerance`) issue a NormalizationWarning naming `name`. scale=False
    returns them as given (masses that are data: unbalanced transport)."""
    if value is None:
        if allow_none:
            return None
        raise input_error(name, "is required (an array of weights), not None")
    original = real_array(name, value, (1,), nonempty=True, what="nonnegative real numbers")
    if size is not None and original.shape[0] != size:
        raise input_error(name, f"has {original.shape[0]} entries for {size} points; accepted: {size} weights")
    w = np.ascontiguousarray(original, dtype=np.float64)
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise input_error(name, f"entry {i} is {w[i]:g}; accepted: finite, nonnegative weights")
    if not w.any():
        raise input_error(name, "are all zero: there is no mass to transport; accepted: weights with a positive sum")
    total = weight_total(w)
    if warn and not abs(total - 1.0) <= weight_tolerance(original.dtype, w.size):
        from ._checks import NormalizationWarning

        shown = f"{total:.6g}" if math.isfinite(total) else "more than the largest double"
        warnings.warn(f"{name} sums to {shown}, not 1: divided by its sum", NormalizationWarning, stacklevel=stacklevel + 1)
    return _unit_scale(w) if scale else w


# ---- numbers, flags, names ----------------------------------------------------------------------

def as_int(name: str, value, low: int = INT_MIN, high: int = INT_MAX) -> int:
    """`value` (a Python or numpy integer, not a bool) as an int in [low, high], else InputError
    naming the range (a C int's by default)."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iu":
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise input_error(name, f"must be an integer, not {type(value).__name__} {echo(value)}")
    value = int(value)
    if not low <= value <= high:
        raise input_error(name, f"is {echo(value)}, outside the accepted range [{low}, {high}]")
    return value


def as_float(name: str, value, low: float = -math.inf, high: float = math.inf, finite: bool = False,
             low_open: bool = False) -> float:
    """`value` (a real number: Python, numpy, a 0-d array or a one-element torch tensor without
    grad) as a float, else InputError (complex numbers and strings are refused, never cast).
    With bounds, values outside [low, high] ((low, high] when low_open) or NaN are refused;
    with finite, so are infinities."""
    if _torch_tensor(value):
        if getattr(value, "requires_grad", False) or value.numel() != 1 or value.is_complex():
            raise input_error(name, f"must be a real number, not a tensor of shape {tuple(value.shape)} "
                                    f"({value.dtype}{', requires grad' if value.requires_grad else ''})")
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or isinstance(value, (str, bytes)):
        raise input_error(name, f"must be a real number, not {type(value).__name__} {echo(value)}")
    if isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real):
        raise input_error(name, f"must be a real number, not complex {echo(value)}")
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        value = value.item()
    if not isinstance(value, numbers.Real):
        raise input_error(name, f"must be a real number, not {type(value).__name__} {echo(value)}")
    try:
        number = float(value)
    except OverflowError as e:  # an int beyond the range of a double
        raise input_error(name, f"is {echo(value)}, out of the range of a double (about 1.8e308)") from e
    bounded = low > -math.inf or high < math.inf
    where = f" in {'(' if low_open else '['}{low:g}, {high:g}]" if bounded else ""
    if (math.isnan(number) and (finite or bounded)) or (finite and math.isinf(number)):
        raise input_error(name, f"is {number}; accepted: a finite number{where}")
    if number < low or number > high or (low_open and number == low):
        raise input_error(name, f"is {number:g}; accepted: a number{where}")
    return number


def as_bool(name: str, value) -> bool:
    """`value` (True/False, numpy bools, or the integers 0 and 1) as a bool; a string ("False"),
    None or any other value is refused instead of being read by its truth value."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(value)
    raise input_error(name, f"must be True or False, not {type(value).__name__} {echo(value)}")


def as_str(name: str, value, choices: Optional[Sequence[str]] = None) -> str:
    """`value` as a str (one of `choices` when given), else InputError listing them."""
    if not isinstance(value, str):
        accepted = f"one of {', '.join(choices)}" if choices else "a string"
        raise input_error(name, f"must be {accepted}, not {type(value).__name__} {echo(value)}")
    if choices is not None and value not in choices:
        raise input_error(name, f"unknown {name} {echo(value)}; one of: {', '.join(choices)}")
    return value


def as_path(name: str, value) -> bytes:
    """A filesystem path (str, bytes or os.PathLike) as the bytes the C++ side takes: bytes and the
    undecodable bytes of a str (surrogate escapes, as os.listdir returns for non-UTF-8 names) are
    kept byte for byte (os.fsencode). Empty paths and NUL bytes are refused."""
    try:
        path = os.fspath(value)
    except TypeError:
        raise input_error(name, f"must be a path (str, bytes or os.PathLike), not {type(value).__name__} "
                                f"{echo(value)}") from None
    raw = os.fsencode(path)
    if not raw:
        raise input_error(name, "is an empty path; accepted: a file or folder name")
    if b"\0" in raw:
        raise input_error(name, f"contains a NUL byte ({echo(path)}); accepted: a path without one")
    return raw


def display_path(path) -> str:
    """A path (str or bytes) as text for a message: undecodable bytes as \\xNN escapes."""
    raw = os.fsencode(path)
    return raw.decode("utf-8", "backslashreplace")


def as_callable_or_flag(name: str, value):
    """progress arguments: None (a bar on a terminal), False (nothing) or a callable."""
    if value is None or value is False or callable(value):
        return value
    raise input_error(name, f"must be a callable, None (a bar on a terminal) or False, not "
                            f"{type(value).__name__} {echo(value)}")


# ---- torch tensors (tokenflow.torch; torch is imported by the caller) ---------------------------

def as_tensor(torch, name: str, value, ndims: Sequence[int], dtype=None, finite: bool = True):
    """`value` (a torch tensor, which may require grad and live on any device, or anything
    :func:`real_array` takes) as a floating torch tensor with one of the dimensions in `ndims` and
    no empty axis. A tensor keeps its floating dtype and device (and its graph); an integer tensor
    or array becomes `dtype` (torch's default dtype when None), a numpy float array keeps its
    dtype. Refused with InputError naming `name`: complex, bool and other non-real dtypes, ragged
    lists, other dimensions, empty axes (a 0 x 3 cost) and, when `finite`, NaN or infinite entries
    (the count is named)."""
    if isinstance(value, torch.Tensor):
        if value.is_complex() or value.dtype == torch.bool:
            raise input_error(name, f"has dtype {value.dtype}; accepted: real numbers (float or integer dtypes)")
        tensor = value
    else:
        array = real_array(name, value, None, nonempty=False)
        if array.dtype.kind == "f" and not array.flags.writeable:
            array = array.copy()  # torch.from_numpy refuses read-only arrays
        # np.require, not np.ascontiguousarray, which makes a 0-d array 1-d
        array = np.require(array, requirements="C")
        tensor = torch.from_numpy(array) if array.dtype.kind == "f" else torch.as_tensor(array)
    if not tensor.is_floating_point():
        tensor = tensor.to(dtype or torch.get_default_dtype())
    elif dtype is not None and not isinstance(value, torch.Tensor):
        tensor = tensor.to(dtype)
    if tensor.dim() not in ndims:
        raise input_error(name, f"must be {_accepted(ndims)}, not of shape {tuple(tensor.shape)}")
    if 0 in tensor.shape:
        raise input_error(name, f"is empty (shape {tuple(tensor.shape)}); accepted: {_accepted(ndims)} with at least "
                                "one entry along each axis")
    if finite:
        ok = torch.isfinite(tensor.detach())
        if not bool(ok.all()):
            bad = int(ok.numel() - ok.sum())
            raise input_error(name, f"has {bad} non-finite entries (of {ok.numel()}); accepted: finite numbers")
    return tensor


def tensor_weights(torch, name: str, value, size: int, like, normalize: bool = True):
    """Weights for tokenflow.torch: None (uniform, in the dtype and on the device of `like`), or
    nonnegative finite reals with a positive sum, of shape (size,) or (..., size), returned divided
    by their sum in torch (inside the graph: the gradient sees the normalization) without overflow
    ([1e308, 1e308] is [0.5, 0.5]). Lists and arrays are checked and normalized in float64 and then
    take the dtype of `like` (huge weights beside a float16 cost are not inf first); tensors keep
    the finer of their dtype and that of `like`. normalize=False:
    checked and returned as given (masses that are data: unbalanced transport; refused when the
    dtype of `like` cannot hold them)."""
    if value is None:
        return torch.full((size,), 1.0 / size, dtype=like.dtype, device=like.device)
    tensor = isinstance(value, torch.Tensor)
    w = as_tensor(torch, name, value, (1, 2, 3), dtype=like.dtype if tensor else torch.float64)
    if tensor:  # in the finer of its dtype and like's (float16 weights beside a float32 cost: float32)
        w = w.to(dtype=torch.promote_types(w.dtype, like.dtype))
    w = w.to(device=like.device)
    cast = (lambda t: t) if tensor else (lambda t: t.to(dtype=like.dtype))
    if w.shape[-1] != size:
        raise input_error(name, f"has shape {tuple(w.shape)}; accepted: ({size},) weights, or one row of {size} "
                                "per problem of a batch")
    values = w.detach()
    if bool((values < 0).any()):
        raise input_error(name, f"has a negative entry ({float(values.min()):g}); accepted: nonnegative weights")
    top = values.amax(-1, keepdim=True)
    if bool((top == 0).any()):
        raise input_error(name, "are all zero: there is no mass to transport; accepted: weights with a positive sum")
    if not normalize:
        masses = cast(w)
        if not bool(torch.isfinite(masses.detach()).all()):
            raise input_error(name, f"has masses up to {float(top.max()):g}, beyond {masses.dtype} (the cost's dtype); "
                                    "accepted: masses that dtype holds (rescale them, or pass a float64 cost)")
        return masses
    # Divided by a power of two near each row's largest entry first (a constant: the normalized
    # weights and their gradient are the same function of w), so that the sum cannot overflow.
    scale = torch.exp2(torch.floor(torch.log2(top.to(torch.float64)))).to(w.dtype)
    scaled = w / scale
    return cast(scaled / scaled.sum(-1, keepdim=True))


class renamed_keys:
    """A context in which a tokenflow.InputError whose key the C++ side names for the CLI
    ("cost_matrix", the flag --cost-matrix; "M[3]", the batch's) is raised again under the
    Python argument's name: ``with renamed_keys(lambda key: "M" if key == "cost_matrix" else None)``."""

    def __init__(self, rename):
        self.rename = rename

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if isinstance(error, _tokenflow.InputError) and getattr(error, "source", "") == "":
            name = self.rename(getattr(error, "key", ""))
            if name is not None:
                raise input_error(name, error.detail) from None
        return False
