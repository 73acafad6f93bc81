"""Shadow continuation: a budgeted, sampled second continuation of the same history, off the request path.

``policy`` decides whether a finished turn gets a shadow call and to which model, under
``budget`` (calls per minute, tokens per hour, money per day, per-pair quotas) and the
per-target ``breaker``; ``recorder`` counts the pairs as ``Counts.shadow``; ``turns`` holds
what flows in (an integration's offer, the checked turn, the reply). The runtime's
``ShadowRunner`` (``handoffmon.runtime.shadow``) runs it; integrations supply the call
itself (``integrations.router_shadow`` for a wrapped ``litellm.Router``), so the core
never imports litellm.
"""

from __future__ import annotations

from handoffmon.shadow.breaker import Breaker
from handoffmon.shadow.budget import Budget, Reservation, SlidingWindow
from handoffmon.shadow.policy import Decision, ShadowPolicy, Skip

__all__ = ["Breaker", "Budget", "Decision", "Reservation", "ShadowPolicy", "Skip", "SlidingWindow"]
