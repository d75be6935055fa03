"""tokenflow: transformers as flows of measures, Sinkhorn Transformers and optimal transport.

The same engine as the ``tokenflow`` CLI, with numpy arrays in and out (docs/design.md section 2)::

    simulate(config, x0=None, weights=None, positions=None)   the particle flow
    attention_matrix(config, x)                               n x n attention weights
    attention_field(config, x)                                Gamma_mu(x), the velocity of the flow
    interaction_energy(config, x), metric_slope, energy_rate  E, |dE| and dE/dt (gradient flows)
    sinkhorn(x, y, a=None, b=None, epsilon=0.1, ...)          entropic optimal transport
    exact_ot(x, y, a=None, b=None, cost=...)                  exact optimal transport
    wasserstein(x, y, p=2, ...)                               W_p (sorted, exact or Sinkhorn)
    gaussian(config)                                          moment ODEs of the Gaussian closure
    meanfield(config), stability(config)                      particles against them; W_2 stability
    train(config)                                             train a Sinkhorn Transformer
    SinkhornTransformer.load(path).couple(x, y, a, b)         its coupling of two measures

Configs are dicts that mirror the CLI's TOML files. Bad input raises InputError (a ValueError)
with the CLI's message. A result that is not finite, or a run that computed none (the CLI's status
"failed", exit 1), raises FloatingPointError; an iterative solve that stops short of its tolerance
(Sinkhorn at max_iter, a stalled dopri5 run) warns with ConvergenceWarning (a UserWarning), as the
CLI prints a warning line; a fast summation that summed most rows exactly warns with
SummationWarning. Figures: ``tokenflow.plot`` (matplotlib). Differentiable Sinkhorn for
PyTorch models: ``tokenflow.torch`` (imported on its own; ``import tokenflow`` never imports torch).
POT's function names and conventions: ``import tokenflow.pot as ot``. Threads: tokenflow chooses
them itself (``thread_policy()``; ``set_thread_policy()`` overrides).

Examples
--------
>>> import tokenflow
>>> tokenflow.simulate({"init": {"n": 8}, "run": {"T": 0.1}}).positions.shape
(8, 2)
"""
from . import _threads  # noqa: F401  (OpenMP's wait policy, set before _tokenflow loads OpenMP)
from . import _tokenflow
from ._checks import ConvergenceWarning, SummationWarning, TrainingWarning
from ._tokenflow import InputError
from .config import attention_kinds, config_keys, to_toml
from .dynamics import SimulationResult, attention_field, attention_matrix, energy_rate, interaction_energy, metric_slope, simulate
from .gaussian import GaussianResult, StudyResult, gaussian, meanfield, stability
from .model import SinkhornTransformer, TrainResult, train
from . import tasks
from .transport import NormalizationWarning, OTResult, WassersteinResult, exact_ot, sinkhorn, wasserstein

from ._threads import set_thread_policy, thread_policy

__version__ = _tokenflow.__version__
InputError.__module__ = "tokenflow"  # shown as tokenflow.InputError
# The class is made by the compiled module (python/src/export_errors.cpp); its docstring is here.
InputError.__doc__ = """Bad input: the error tokenflow's functions raise for it (a ValueError).

Its message is the CLI's error line (without "tokenflow: "): where the problem is, which key or
argument, what was given and what is accepted. The CLI exits with code 2 on the same input.
tokenflow.pot also raises POT's own errors (ValueError, AssertionError) where POT does.

Attributes
----------
source : str
    Where the input came from: a config file's path, "config" (a dict), ``--set``, a .npy file's
    path; "" for a Python argument.
key : str
    The config key (dotted: ``run.T``) or the argument (``epsilon``, ``x``) that is wrong.
detail : str
    What is wrong with it: what was given and what is accepted.

Examples
--------
>>> import tokenflow
>>> try:
...     tokenflow.simulate({"run": {"T": -1}})
... except tokenflow.InputError as error:
...     print(error.source, error.key, error.detail, sep=" | ")
config | run.T | must be >= 0 (got -1)
"""

__all__ = ["ConvergenceWarning", "GaussianResult", "InputError", "NormalizationWarning", "OTResult", "SimulationResult", "SinkhornTransformer", "StudyResult", "SummationWarning",
           "TrainResult", "TrainingWarning", "WassersteinResult", "attention_field", "attention_kinds", "attention_matrix", "config_keys", "energy_rate", "interaction_energy", "metric_slope", "exact_ot", "gaussian", "meanfield", "simulate", "sinkhorn", "stability",
           "to_toml", "train", "wasserstein", "__version__"]
__all__ += ["set_thread_policy", "thread_policy"]
