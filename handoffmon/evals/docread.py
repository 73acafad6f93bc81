"""Reading hand-editable JSON documents (shapes, eval results) with errors that name the key.

Every check raises ``InputError`` naming the file and the key path (``rules[3].n``), so a
truncated or hand-edited document stops the command with the bad-input exit code
instead of an ``IndexError`` deep inside the comparison. Keys a reader does not know are
ignored (a newer writer may add some); known keys are checked for type and, where a
list runs along another (per-bucket values), for length.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from handoffmon.depth import BUCKET_LABEL
from handoffmon.errors import InputError, json_got, json_shown

T = TypeVar("T")
_MISSING = object()


class DocReader:
    """Typed access to one parsed JSON document; every error names ``source`` and the key path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, path: str, message: str) -> InputError:
        """``InputError`` "<source>: <path>: <message>"."""
        return InputError(f"{self.source}: {path}: {message}")

    def key(self, obj: Mapping[str, Any], key: str, path: str, default: Any = _MISSING) -> Any:
        """``obj[key]``; a missing key is an error unless ``default`` is given."""
        if key in obj:
            return obj[key]
        if default is _MISSING:
            raise self.error(_join(path, key), "missing")
        return default

    def mapping(self, value: Any, path: str) -> dict[str, Any]:
        """A JSON object."""
        if not isinstance(value, dict):
            raise self.error(path, f"expected an object, got {json_got(value)}")
        return value

    def array(self, value: Any, path: str, length: int | None = None, along: str = "") -> list[Any]:
        """A JSON list (of ``length`` items when given; ``along`` names what fixes that length)."""
        if not isinstance(value, list):
            raise self.error(path, f"expected a list, got {json_got(value)}")
        if length is not None and len(value) != length:
            raise self.error(path, f"{len(value)} value(s), but {along} has {length}")
        return value

    def string(self, value: Any, path: str) -> str:
        """A JSON string."""
        if not isinstance(value, str):
            raise self.error(path, f"expected a string, got {json_got(value)}")
        return value

    def integer(self, value: Any, path: str, minimum: int | None = None) -> int:
        """A JSON integer (not a boolean, not a string of digits), at least ``minimum``."""
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(path, f"expected an integer, got {json_got(value)}")
        if minimum is not None and value < minimum:
            raise self.error(path, f"expected an integer ≥ {minimum}, got {value}")
        return value

    def number(self, value: Any, path: str, *, optional: bool = False, infinite: bool = False) -> Any:
        """A JSON number (``null`` when ``optional``; ``"inf"``/``"-inf"`` when ``infinite``)."""
        if value is None and optional:
            return None
        if infinite and value in ("inf", "-inf"):
            return float(value)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            null = " or null" if optional else ""
            raise self.error(path, f"expected a number{null}, got {json_got(value)}")
        return value

    def probability(self, value: Any, path: str, *, optional: bool = False) -> float | None:
        """A number in [0, 1] (or null when ``optional``)."""
        x = self.number(value, path, optional=optional)
        if x is not None and not 0.0 <= x <= 1.0:
            raise self.error(path, f"expected a number in [0, 1], got {x!r}")
        return None if x is None else float(x)

    def confidence(self, value: Any, path: str = "confidence") -> Any:
        """A confidence level: a number strictly between 0 and 1."""
        x = self.number(value, path)
        if not 0 < x < 1:
            raise self.error(path, f"expected a number in (0, 1), got {x!r}")
        return x

    def version(self, data: Mapping[str, Any], schema: str, known: int) -> int:
        """The document's ``version``: an integer from 1 to ``known`` (not a boolean, not 0)."""
        v = data.get("version")
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= known:
            raise self.error(
                "version", f"unsupported {schema} version {json_shown(v)} (this reader reads 1 to {known})"
            )
        return v

    def share(self, value: Any, passes: int, n: int, path: str) -> float | None:
        """An adherence that is ``passes / n`` (null when n = 0): the counts are what is compared,
        the share what is shown, so a hand-edited one must not disagree with them."""
        x = self.probability(value, path, optional=True)
        expected = passes / n if n else None
        if (x is None) != (expected is None) or (x is not None and abs(x - passes / n) > 1e-9):
            want = "null" if expected is None else f"{expected:.6g}"
            raise self.error(path, f"{json_shown(value)}, but passes/n = {passes}/{n} is {want}")
        return x

    def interval(self, lo: Any, hi: Any, share: float | None, path_lo: str, path_hi: str) -> tuple[Any, Any]:
        """An interval's bounds: numbers in [0, 1] (or null) around ``share``."""
        low = self.probability(lo, path_lo, optional=True)
        high = self.probability(hi, path_hi, optional=True)
        if share is not None and low is not None and low > share + 1e-9:
            raise self.error(path_lo, f"{low!r} is above the interval's adherence {share!r}")
        if share is not None and high is not None and high < share - 1e-9:
            raise self.error(path_hi, f"{high!r} is below the interval's adherence {share!r}")
        return low, high

    def items(self, value: Any, path: str, read: Callable[[Any, str], T]) -> list[T]:
        """Every item of a list, read by ``read(item, "path[i]")``."""
        return [read(v, f"{path}[{i}]") for i, v in enumerate(self.array(value, path))]

    def bucket_labels(self, value: Any, path: str) -> tuple[str, ...]:
        """Depth bucket labels as ``DepthBuckets`` writes them: contiguous from 1, in depth order."""
        from handoffmon.depth import DepthBuckets

        labels = tuple(self.items(value, path, self.string))
        for i, lab in enumerate(labels):
            if not BUCKET_LABEL.match(lab):
                raise self.error(
                    f"{path}[{i}]", f"{lab!r} is not a depth bucket label (like '1', '3-4' or '97+')"
                )
        if not labels:
            raise self.error(path, "no depth buckets")
        try:
            expected = DepthBuckets.from_labels(labels).labels
        except ValueError as exc:
            raise self.error(path, f"not depth buckets: {exc}") from exc
        if expected != labels:
            raise self.error(
                path,
                f"{', '.join(labels)} are not contiguous depth buckets from 1 in depth order "
                f"(buckets with these lower bounds are {', '.join(expected)})",
            )
        return labels


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def finite_or_nan(value: float | None) -> float:
    """None (JSON null for NaN) → NaN."""
    return math.nan if value is None else float(value)
