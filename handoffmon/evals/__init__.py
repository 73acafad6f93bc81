"""Eval harness: drift and pressure scripts, the replay runner, the switch matrix, production shapes."""

from __future__ import annotations

from handoffmon.evals.script import DriftScript, ScriptTurn, load_script, load_scripts

__all__ = ["DriftScript", "ScriptTurn", "load_script", "load_scripts"]
