"""Risk-aware fallback ordering: the refit's pair-risk table, the policy, the request-time prefix lookup.

Adapters (``integrations.router_routing`` for a wrapped ``litellm.Router``) read the
router's candidates, call ``RequestRouting.decide`` and apply the order.
"""

from __future__ import annotations

from handoffmon.routing.policy import OUTCOMES, Candidate, Decision, FallbackPolicy
from handoffmon.routing.state import DecisionCounts, RoutingState, TableHolder
from handoffmon.routing.table import PairRisk, PairRiskTable, ShadowCost

__all__ = [
    "OUTCOMES",
    "Candidate",
    "Decision",
    "DecisionCounts",
    "FallbackPolicy",
    "PairRisk",
    "PairRiskTable",
    "RoutingState",
    "ShadowCost",
    "TableHolder",
]
