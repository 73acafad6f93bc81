"""What an eval talks to: a litellm model, a litellm Router (from a config file), or the simulator."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from handoffmon._extras import requires_extra
from handoffmon.attribution.names import ModelNames
from handoffmon.config import load_yaml_text
from handoffmon.errors import ConfigError

Messages = Sequence[Mapping[str, Any]]

SEED_OPTIONAL: dict[str, Any] = {"drop_params": True}
"""Sent with every eval call: litellm drops a parameter the serving provider does not take (the
run's ``seed``: Anthropic refuses it, which failed every call of a group or fallback served by
it) and still sends it to one that does. ``params`` given to a responder override it."""


@dataclass(frozen=True)
class Reply:
    """A model's reply and the deployment that wrote it (after router fallbacks)."""

    text: str
    author: str


class Responder(Protocol):
    """Produces the next assistant reply; ``seed`` makes each run's sampling distinct and repeatable."""

    async def __call__(self, model: str, messages: Messages, *, seed: int) -> Reply: ...


class MissingCredentialsError(ConfigError):
    """A model call failed for want of the provider's credentials (no key, or a key it refused).

    Every call to that deployment fails the same way, so an eval stops at the first one: no
    retry, no "failed run, rerun to resume" (exit 5) for what no rerun repairs (exit 1).
    """


_NO_CREDENTIALS = re.compile(
    r"missing credentials|api_key client option must be set|missing [\w ]{0,40}api key", re.IGNORECASE
)
"""How providers say it when litellm maps it to another error than AuthenticationError: the
OpenAI SDK's client refuses to start without a key (litellm: InternalServerError, status 500)."""


def credentials_error(exc: BaseException, model: str) -> MissingCredentialsError | None:
    """``MissingCredentialsError`` naming the requested ``model``, the deployment, its provider and
    the environment variables litellm finds missing, when ``exc`` is a provider refusing or
    lacking credentials (litellm's ``AuthenticationError``, or a "Missing credentials" message);
    None for any other error (those are retried)."""
    text = str(exc)
    refused = any(c.__name__ == "AuthenticationError" for c in type(exc).__mro__)  # litellm's, openai's
    if not refused and not _NO_CREDENTIALS.search(text):
        return None
    provider = str(getattr(exc, "llm_provider", "") or "")
    served = str(getattr(exc, "model", "") or "")
    deployment = served if not provider or served.startswith(f"{provider}/") else f"{provider}/{served}"
    missing: list[str] = []
    if deployment:
        try:
            import litellm

            missing = list(litellm.validate_environment(model=deployment).get("missing_keys") or [])
        except Exception:  # an unknown provider: the provider's own message below says what it needs
            missing = []
    where = f"{model!r}" + (f" (deployment {deployment})" if deployment and deployment != model else "")
    need = (
        f"no credentials: set {', '.join(missing)} in the environment, or api_key in the deployment's "
        "litellm_params"
        if missing
        else "the provider refused its credentials or found none: check the deployment's api_key"
    )
    said = text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__
    return MissingCredentialsError(
        f"model {where}: {need} ({provider or 'provider unknown'} said: {said}). A configuration "
        "error, not retried: the eval stopped at the first call that raised it"
    )


def author_of(response: Any, names: ModelNames, fallback: str) -> str:
    """The canonical author of a litellm response, named exactly as production names it.

    The serving deployment comes from ``response._hidden_params`` (after the router's
    fallbacks) and goes through the same author rule (``ingress.author``) and ``ModelNames``
    (``attribution.canonical_models``) as the monitor, and is cut and escaped as production's
    label of it is (``LabelGuard.model``: ``MAX_LABEL_CHARS``, unprintable characters
    escaped), so eval rows and production counts join on one name. ``fallback`` (the
    requested model) is used only when the response names nothing.
    """
    from handoffmon.ingress import author, served_by_response
    from handoffmon.labels import MAX_LABEL_CHARS, exportable

    served = served_by_response(response)
    raw = author(names, served.deployment_id, served.model_name, served.response_model)
    return exportable(names.canonical(raw or fallback)[:MAX_LABEL_CHARS])


def _text(response: Any) -> str:
    content = response.choices[0].message.content
    return content if isinstance(content, str) else ""


@dataclass
class LitellmResponder:
    """``litellm.acompletion(model=…)``; ``params`` (temperature, max_tokens, …) go to every call.

    ``names`` canonicalizes authors as the monitor does (``attribution.canonical_models``).
    """

    params: dict[str, Any] = field(default_factory=dict)
    names: ModelNames = field(default_factory=ModelNames)

    async def __call__(self, model: str, messages: Messages, *, seed: int) -> Reply:
        with requires_extra("evals", "handoffmon eval run against litellm models"):
            import litellm

        resp = await litellm.acompletion(
            model=model, messages=list(messages), seed=seed, **{**SEED_OPTIONAL, **self.params}
        )
        return Reply(_text(resp), author_of(resp, self.names, model))


@dataclass
class RouterResponder:
    """``router.acompletion(model=<group>)``; the author is the deployment that served it, canonicalized."""

    router: Any
    params: dict[str, Any] = field(default_factory=dict)
    names: ModelNames = field(default_factory=ModelNames)

    async def __call__(self, model: str, messages: Messages, *, seed: int) -> Reply:
        resp = await self.router.acompletion(
            model=model, messages=list(messages), seed=seed, **{**SEED_OPTIONAL, **self.params}
        )
        return Reply(_text(resp), author_of(resp, self.names, model))


def router_from_config(path: str | Path) -> Any:
    """A ``litellm.Router`` from a YAML file with ``model_list`` (and optional ``router_settings``).

    The layout is LiteLLM Proxy's config.yaml, so a proxy config works as is.

    Raises:
        ConfigError: unreadable file or no ``model_list`` (naming the key and file).
    """
    import yaml

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    source = str(path)
    try:  # a key given twice is refused: PyYAML keeps the last (a second model_list) silently
        data = load_yaml_text(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise ConfigError(f"cannot read router config: {exc}", source=source) from exc
    except RecursionError as exc:  # the parser recurses per nesting level
        raise ConfigError(
            "cannot read router config: nested too deeply (thousands of levels)", source=source
        ) from exc
    if not isinstance(data, dict) or not isinstance(data.get("model_list"), list) or not data["model_list"]:
        raise ConfigError("expected a non-empty list", key="model_list", source=source)
    settings = data.get("router_settings") or {}
    if not isinstance(settings, dict):
        raise ConfigError("must be a mapping", key="router_settings", source=source)
    with requires_extra("evals", "an eval run through a litellm Router"):
        from litellm.router import Router

    try:
        return Router(model_list=data["model_list"], **settings)
    except Exception as exc:  # litellm raises assorted types for a bad model_list
        raise ConfigError(
            f"litellm rejected the router config: {exc}", key="model_list", source=source
        ) from exc


def router_group_of(router: Any, source: str) -> Callable[[str], str]:
    """``--model`` resolver of a ``litellm.Router``: the name itself when the router can route it
    (a group, an alias, a wildcard, a deployment id or a deployment's litellm model: the router's
    own lookup decides), else ``ConfigError`` naming ``source`` and the router's groups, before
    any call (every call would fail, be retried, and the run end as "failed, rerun to resume")."""
    lookup = getattr(router, "_common_checks_available_deployment", None)

    def group_of(name: str) -> str:
        if lookup is None:  # a litellm without that lookup: the first call says it instead
            return name
        with requires_extra("evals", "an eval run through a litellm Router"):
            from litellm.exceptions import BadRequestError

        try:
            lookup(model=name, messages=[{"role": "user", "content": ""}])
        except BadRequestError as exc:
            groups = ", ".join(router.get_model_names())
            raise ConfigError(
                f"{name!r} is no model group of the router (groups: {groups}), nor an alias, wildcard, "
                "deployment id or deployment model of it",
                key="--model",
                source=source,
            ) from exc
        except Exception:  # the lookup itself failed (another litellm): the first call reports it
            return name
        return name

    return group_of


def seeded_sim_provider_class() -> type:
    """``SimProvider`` whose randomness also depends on the request's ``seed``.

    The simulator is deterministic in the history, so replays of one script would all be
    identical; folding the seed into its bookkeeping key (a leading pseudo-message the
    model never sees in its reply) makes runs with different seeds independent, as
    sampled runs of a real model are, and runs with the same seed identical.
    """
    import numpy as np

    from handoffmon.sim.provider import SimProvider, TurnTruth, history_key
    from handoffmon.sim.provider import _seed_from as seed_from

    class SeededSimProvider(SimProvider):  # type: ignore[misc,valid-type]
        def _keyed(self, messages: list[Any], kwargs: Mapping[str, Any]) -> list[Any]:
            seed = (kwargs.get("optional_params") or {}).get("seed")
            return [{"role": "seed", "content": str(seed)}, *messages] if seed is not None else messages

        def previous(self, messages: Sequence[Mapping[str, Any]]) -> tuple[int, Any]:
            """As the simulator's, also for a history another process wrote (a resumed run).

            The simulator keeps each conversation's hidden state (the previous turn's intent
            and author) in memory, so a conversation resumed from turns ``eval run --db``
            stored, or from prefixes ``eval switch-matrix`` cached, continued as if no turn
            came before it: no prefix author, no handoff effect. A reply is a function of
            (seed, history, model), so each stored assistant turn is redrawn with each fleet
            model until one writes its text, and remembered; a turn no model writes (a
            history the simulator did not produce) leaves the state unknown, as before.
            """
            depth, prev = super().previous(messages)
            if prev is not None or depth == 1:
                return depth, prev
            for i, m in enumerate(messages):
                if m.get("role") != "assistant":
                    continue
                key = history_key(messages[: i + 1])
                with self._lock:
                    known = self._turns.get(key)
                if known is None:
                    known = self._redraw(messages[:i], str(m.get("content") or ""), prev)
                    if known is None:
                        return depth, None
                    with self._lock:
                        self._remember(self._turns, key, known)
                prev = known
            return depth, prev

        def _redraw(self, context: Messages, text: str, before: Any) -> Any:
            """The record of the fleet model that writes ``text`` after ``context``, or None."""
            depth = 1 + sum(1 for m in context if m.get("role") == "assistant")
            key = history_key(context)
            prefix = before.author if before is not None else None
            chained = before.intent if before is not None else None
            for model in self.fleet.names:
                rng = np.random.default_rng(seed_from(self.seed, "turn", key, model))
                intent = self.dynamics.draw(model, prefix, depth, chained, rng)
                written, answer = self.writer.compose(intent, rng, before.answer if before else None)
                if written == text:
                    return TurnTruth(model, prefix, depth, intent, written, answer, chained)
            return None

        async def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            name = self._model_name(model)
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            return self._response(name, messages, self.reply(name, self._keyed(messages, kwargs)))

        def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            name = self._model_name(model)
            return self._response(name, messages, self.reply(name, self._keyed(messages, kwargs)))

    return SeededSimProvider


@dataclass(frozen=True)
class SimTarget:
    """The simulator as an eval target: router, provider (for call counts) and fleet."""

    router: Any
    provider: Any
    fleet: Any

    @property
    def names(self) -> ModelNames:
        """Canonical names of the fleet's deployments (what a monitor of this fleet is configured with)."""
        from handoffmon.sim.router import canonical_models

        return ModelNames(canonical_models(self.fleet, self.provider.provider_name or ""))

    @property
    def responder(self) -> RouterResponder:
        """A responder over the simulated router, naming authors as the fleet's monitor does."""
        return RouterResponder(self.router, names=self.names)

    def group_of(self, name: str) -> str:
        """Router group of a model given by name or group."""
        for m in self.fleet.models:
            if name in (m.name, m.group):
                return str(m.group)
        groups = ", ".join(dict.fromkeys(str(m.group) for m in self.fleet.models))
        raise ConfigError(
            f"unknown simulated model {name!r} (groups: {groups}; models: {', '.join(self.fleet.names)})",
            key="--model",
        )


def sim_target(
    fleet: Any = None, *, seed: int = 0, latency_s: float = 0.0, fallbacks: bool = True, failures: bool = True
) -> SimTarget:
    """The simulator behind a real ``litellm.Router`` (offline, deterministic per seed).

    Args:
        fleet: a ``handoffmon.sim.Fleet`` (default: the demo fleet).
        seed: the provider's base seed.
        latency_s: simulated service time per call.
        fallbacks: keep the fleet's router fallbacks (off for the switch matrix, where
            every turn must be written by the model the cell names).
        failures: keep injected 429s/timeouts (the runner retries them).
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import dataclasses

    from handoffmon.sim.fleet import default_fleet
    from handoffmon.sim.router import build_router

    fleet = fleet or default_fleet()
    if not failures:
        models = tuple(dataclasses.replace(m, rate_limit_rate=0.0, timeout_rate=0.0) for m in fleet.models)
        fleet = dataclasses.replace(fleet, models=models)
    provider = seeded_sim_provider_class()(fleet, seed=seed, latency_s=latency_s)
    extra: dict[str, Any] = {} if fallbacks else {"fallbacks": []}
    return SimTarget(build_router(fleet, provider, **extra), provider, fleet)
