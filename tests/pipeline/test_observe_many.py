"""ErrorSink.observe_many: a turn's overheads reach every observer, batched where it can take them."""

from __future__ import annotations

from collections.abc import Sequence

from handoffmon.pipeline.aggregates import Aggregates
from handoffmon.pipeline.errors import ErrorSink


class _One:
    def __init__(self) -> None:
        self.seen: list[tuple[str, float]] = []

    def observe_overhead(self, stage: str, seconds: float) -> None:
        self.seen.append((stage, seconds))

    def count_error(self, stage: str) -> None:
        pass

    def count_drop(self, n: int = 1) -> None:
        pass


class _Many(_One):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def observe_overheads(self, items: Sequence[tuple[str, float]]) -> None:
        self.calls += 1
        self.seen.extend(items)


class _Broken(_One):
    def observe_overhead(self, stage: str, seconds: float) -> None:
        raise RuntimeError("observer down")


def test_observe_many_batches_where_it_can_and_isolates_failures() -> None:
    one, many, broken = _One(), _Many(), _Broken()
    sink = ErrorSink(Aggregates())
    sink.observe_with([broken, one, many])
    items = (("begin", 1e-6), ("background", 2e-4))
    sink.observe_many(items)
    sink.observe("finish", 3e-6)
    assert one.seen == [*items, ("finish", 3e-6)]
    assert many.seen == [*items, ("finish", 3e-6)] and many.calls == 1
