"""Parts of numpydoc docstrings that several functions share (a parameter several functions take,
written once): a line ``{{name}}`` of a docstring becomes the part, indented as the line."""
from __future__ import annotations

import re
import textwrap


def shared(**parts: str):
    """A decorator that puts each part in place of its ``{{name}}`` line of the function's docstring.

    >>> @shared(x="x : float\\n    A number.")
    ... def f(x):
    ...     '''Parameters
    ...     ----------
    ...     {{x}}
    ...     '''
    >>> print(f.__doc__.strip())
    Parameters
        ----------
        x : float
            A number.
    """
    def apply(function):
        doc = function.__doc__
        for name, text in parts.items():
            line = re.search(r"^( *)\{\{" + name + r"\}\}$", doc, re.M)
            if line is None:
                raise ValueError(f"{function.__qualname__}'s docstring has no {{{{{name}}}}} line")
            doc = doc.replace(line.group(0), textwrap.indent(textwrap.dedent(text).strip("\n"), line.group(1)), 1)
        function.__doc__ = doc
        return function
    return apply
