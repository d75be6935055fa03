"""POT's ``ot.bregman``: entropic optimal transport (the functions of :mod:`tokenflow.pot`).

>>> import tokenflow.pot.bregman as bregman
>>> round(bregman.sinkhorn2([0.5, 0.5], [0.5, 0.5], [[0.0, 1.0], [1.0, 0.0]], 1.0), 4)
0.2689
"""
from . import (_missing_name, empirical_sinkhorn, empirical_sinkhorn2, empirical_sinkhorn_divergence, greenkhorn,
               sinkhorn, sinkhorn2, sinkhorn_epsilon_scaling, sinkhorn_knopp, sinkhorn_log, sinkhorn_stabilized)

__all__ = ["empirical_sinkhorn", "empirical_sinkhorn2", "empirical_sinkhorn_divergence", "greenkhorn", "sinkhorn",
           "sinkhorn2", "sinkhorn_epsilon_scaling", "sinkhorn_knopp", "sinkhorn_log", "sinkhorn_stabilized"]
__getattr__ = _missing_name("bregman", __all__)
