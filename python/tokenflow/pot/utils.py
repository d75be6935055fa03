"""POT's ``ot.utils``: the cost matrix and the uniform histogram (the functions of
:mod:`tokenflow.pot`).

>>> from tokenflow.pot.utils import dist, unif
>>> unif(4).tolist(), dist([[0.0], [1.0]], [[3.0]]).tolist()
([0.25, 0.25, 0.25, 0.25], [[9.0], [4.0]])
"""
from . import _missing_name, dist, unif

__all__ = ["dist", "unif"]
__getattr__ = _missing_name("utils", __all__)
