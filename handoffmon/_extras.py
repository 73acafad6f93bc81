"""Optional dependencies: which extra provides which module, and an ImportError that names it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from handoffmon.errors import MissingExtraError

EXTRAS: dict[str, tuple[str, ...]] = {
    "litellm": ("litellm",),
    "proxy": ("starlette", "uvicorn", "aiohttp", "yarl"),
    "redis": ("redis",),
    "otel": ("opentelemetry.sdk", "opentelemetry.exporter.otlp"),
    "demo": ("litellm", "tqdm"),
    "evals": ("litellm", "tqdm"),
    "turns": ("duckdb",),
}
"""Extra (``pyproject.toml`` ``[project.optional-dependencies]``) → top-level modules it installs."""


def _provided_by(missing: str, modules: tuple[str, ...]) -> bool:
    """Whether the module that failed to import is (part of) one the extra provides."""
    return any(missing == m or missing.startswith(m + ".") or m.startswith(missing + ".") for m in modules)


@contextmanager
def requires_extra(extra: str, feature: str) -> Iterator[None]:
    """Turn a missing optional module inside the block into a :class:`MissingExtraError`.

    Only a module of ``extra`` that is absent is translated; any other ImportError (a
    broken install, a bug in the library) propagates unchanged.

    Args:
        extra: the extra's name in ``pyproject.toml`` (a key of :data:`EXTRAS`).
        feature: what needs it, for the message (``"handoffmon serve"``).

    Raises:
        MissingExtraError: naming ``pip install 'handoffmon[<extra>]'``.
    """
    modules = EXTRAS[extra]
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name is None or not _provided_by(exc.name, modules):
            raise
        raise MissingExtraError(
            f"{feature} needs the {extra!r} extra (module {exc.name!r} is not installed): "
            f"pip install 'handoffmon[{extra}]'",
            name=exc.name,
        ) from exc
