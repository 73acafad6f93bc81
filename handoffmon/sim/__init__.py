"""Simulator: a fleet of synthetic models with planted parameters behind a real litellm Router.

The planted model (see ``fleet`` and ``truth``) decides whether each reply *should*
comply with each rule; the writer produces real text that passes or fails the
configured checkers; handoffmon's checkers decide the verdicts. Importing this package
stays light: litellm is imported only by ``provider``, ``router`` and ``driver``.
"""

from __future__ import annotations

from handoffmon.sim.fleet import Fleet, SimModel, SimRule, default_fleet, make_fleet

__all__ = ["Fleet", "SimModel", "SimRule", "default_fleet", "make_fleet"]
