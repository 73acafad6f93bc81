"""Number options that refuse NaN and infinity.

click's ``float`` and ``FloatRange`` accept ``nan`` (every comparison with NaN is false, so it
passes any bound) and ``inf``: a ``--confidence nan`` or ``--ridge nan`` would run and write
NaN intervals, or fail deep inside numpy with a traceback. These types fail at the option,
as a usage error naming it. They show in ``--help`` as the click types they replace
(``FLOAT``, ``FLOAT RANGE``).
"""

from __future__ import annotations

import math
from typing import Any

import click


def _finite(
    ptype: click.types.FloatParamType, value: Any, param: click.Parameter | None, ctx: click.Context | None
) -> float:
    # the plain float conversion (FloatRange's own convert would check the bounds first)
    number = float(click.types.FloatParamType.convert(ptype, value, param, ctx))
    if not math.isfinite(number):
        ptype.fail(f"{value!r} is not a finite number.", param, ctx)
    return number


class FiniteRange(click.FloatRange):
    """A ``click.FloatRange`` of finite numbers (no ``nan``, ``inf``, ``-inf``)."""

    name = "float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return super().convert(_finite(self, value, param, ctx), param, ctx)


class FiniteFloat(click.types.FloatParamType):
    """A finite ``float``, optionally above (``min_open``) or at least ``min``."""

    name = "float"

    def __init__(self, min: float | None = None, min_open: bool = False) -> None:
        self.min = min
        self.min_open = min_open

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = _finite(self, value, param, ctx)
        if self.min is not None and (number <= self.min if self.min_open else number < self.min):
            op = ">" if self.min_open else ">="
            self.fail(f"{number} is not {op} {self.min:g}.", param, ctx)
        return number


def Finite() -> FiniteFloat:
    """Any finite number."""
    return FiniteFloat()


def PositiveFinite() -> FiniteFloat:
    """A finite number > 0."""
    return FiniteFloat(min=0, min_open=True)


def NonNegativeFinite() -> FiniteFloat:
    """A finite number >= 0."""
    return FiniteFloat(min=0)


RESAMPLES_OPTION = click.option(
    "--resamples",
    default=1000,
    show_default=True,
    type=click.IntRange(min=100),
    help="BCa bootstrap resamples",
)
"""``--resamples`` of the commands that bootstrap (``eval switch-matrix``, ``stats switch-matrix``)."""
