"""POT's ``ot.lp``: exact optimal transport, in any dimension and in one (the functions of
:mod:`tokenflow.pot`).

>>> from tokenflow.pot.lp import emd2, wasserstein_1d
>>> emd2([0.5, 0.5], [0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]]), wasserstein_1d([0.0, 1.0], [2.0, 3.0])
(0.0, 2.0)
"""
from . import _missing_name, emd, emd2, emd2_1d, emd_1d, wasserstein_1d

__all__ = ["emd", "emd2", "emd2_1d", "emd_1d", "wasserstein_1d"]
__getattr__ = _missing_name("lp", __all__)
