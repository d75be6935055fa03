"""The threads of tokenflow's parallel loops: OpenMP's wait policy, chosen before the compiled
module loads the runtime, and when the loops use threads (tokenflow.thread_policy).

tokenflow's parallel loops end in barriers, thousands of times in one Sinkhorn solve. OpenMP's
default policy (libgomp's) spins a waiting thread for up to about 300 000 iterations before it
sleeps: on a machine whose cores other processes use, the spinning threads take the cores from the
working ones and a call can take 10 to 35 times as long as on one thread (docs/python.md,
"Threads"). With OMP_WAIT_POLICY=passive a waiting thread sleeps at once and is woken when work
comes. libgomp reads the variable once, when it is loaded, so it is set here, the compiled module
imported, and the variable removed again: the processes the user starts later do not inherit it.
The user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept. When another library (PyTorch) loaded
libgomp before tokenflow, its policy stands; `WAIT_POLICY` says which case this process is in.
"""
from __future__ import annotations

import os


def _libgomp_loaded() -> bool:
    try:
        with open("/proc/self/maps") as maps:
            return any("libgomp" in line for line in maps)
    except OSError:  # not Linux: libgomp is not what runs the loops
        return False


def _load():
    """(the compiled module, the wait policy in force: "passive", "user's", or "active (OpenMP was
    loaded before tokenflow)")."""
    if os.environ.get("OMP_WAIT_POLICY") is not None or os.environ.get("GOMP_SPINCOUNT") is not None:
        from . import _tokenflow
        return _tokenflow, f"user's (OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, " \
                           f"GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT')})"
    if _libgomp_loaded():
        from . import _tokenflow
        return _tokenflow, "active (OpenMP was loaded before tokenflow, with its default policy)"
    os.environ["OMP_WAIT_POLICY"] = "passive"
    try:
        from . import _tokenflow
    finally:
        del os.environ["OMP_WAIT_POLICY"]
    return _tokenflow, "passive"


_tokenflow, WAIT_POLICY = _load()

# With the spinning policy a pass pays for threads only when it is far longer than the time the
# spinning takes from the other processes (include/tokenflow/parallel.hpp: at 4 10^6 pairs two
# threads were 1.6 times slower than one on a busy machine, at 10^6 ten times): the threshold then.
_SPINNING_MIN_PAIRS = 1 << 22


def _configure() -> None:
    value = os.environ.get("TOKENFLOW_PARALLEL_MIN_PAIRS")
    if value is not None:
        try:
            pairs = int(value)
        except ValueError:
            pairs = -1
        if pairs < 0:
            from ._inputs import input_error
            raise input_error("TOKENFLOW_PARALLEL_MIN_PAIRS", f"is {value!r}; accepted: an integer >= 0 (0: the default)")
        _tokenflow.set_parallel_min_pairs(pairs)
    elif WAIT_POLICY.startswith("active"):
        _tokenflow.set_parallel_min_pairs(_SPINNING_MIN_PAIRS)


_configure()


def thread_policy() -> dict:
    """How tokenflow's parallel loops use threads in this process (docs/python.md, "Threads").

    Parameters
    ----------
    None

    Returns
    -------
    dict
        ``threads``: OpenMP's thread count for the calls of this thread (OMP_NUM_THREADS, or the
        processors), the most a parallel loop uses; ``parallel_min_pairs``: the optimal transport
        passes over fewer pairs run on one thread; ``wait_policy``: OpenMP's wait policy,
        "passive" (set by tokenflow when it loads OpenMP), the user's, or "active" when another
        library loaded OpenMP first; ``processors``: the processors OpenMP sees; ``adaptive``:
        whether each calling thread's governor runs the passes on one thread while threads do not
        pay (another process sharing a core), trying threads again now and then.

    Examples
    --------
    >>> import tokenflow
    >>> sorted(tokenflow.thread_policy())
    ['adaptive', 'parallel_min_pairs', 'processors', 'threads', 'wait_policy']
    """
    return {"threads": _tokenflow.max_threads(), "parallel_min_pairs": _tokenflow.parallel_min_pairs(),
            "wait_policy": WAIT_POLICY, "processors": _tokenflow.processors(),
            "adaptive": _tokenflow.adaptive_threads()}


def set_thread_policy(threads=None, parallel_min_pairs=None, adaptive=None) -> dict:
    """Overrides tokenflow's choice of threads.

    Parameters
    ----------
    threads : int, optional
        The most threads a parallel loop started from this Python thread uses (as
        OMP_NUM_THREADS; 1: every call on one thread); None leaves it.
    parallel_min_pairs : int, optional
        The optimal transport passes over fewer pairs run on one thread (0: the default, 2^15; the
        environment variable TOKENFLOW_PARALLEL_MIN_PAIRS sets it at import); None leaves it.
    adaptive : bool, optional
        The governors on (the default) or off (threads above parallel_min_pairs whatever the
        machine's load); None leaves it.

    Returns
    -------
    dict
        The policy before the change (:func:`thread_policy`).

    Raises
    ------
    tokenflow.InputError
        threads not an integer >= 1, parallel_min_pairs not an integer >= 0, or adaptive not True
        or False (numpy bools and the integers 0 and 1 are taken as such).

    Examples
    --------
    >>> import tokenflow
    >>> before = tokenflow.set_thread_policy(threads=1)
    >>> tokenflow.thread_policy()["threads"]
    1
    >>> _ = tokenflow.set_thread_policy(threads=before["threads"])
    """
    from ._inputs import as_bool, as_int

    before = thread_policy()
    if threads is not None:
        _tokenflow.set_max_threads(as_int("threads", threads, 1))
    if parallel_min_pairs is not None:
        _tokenflow.set_parallel_min_pairs(as_int("parallel_min_pairs", parallel_min_pairs, 0, 2**62))
    if adaptive is not None:
        _tokenflow.set_adaptive_threads(as_bool("adaptive", adaptive))
    return before
