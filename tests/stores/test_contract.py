"""The AttributionStore contract, run against every backend built by ``make_store`` (memory, SQLite, Redis).

Backend-specific behaviour (LRU eviction, SQLite purging, Redis fail-open) is tested in
each backend's own module; this module pins what the attributor and the pipeline rely
on from any store.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from handoffmon.config import StoreConfig
from handoffmon.protocols import AttributionStore, Authorship
from handoffmon.stores import make_store
from tests.conftest import require_redis
from tests.stores.helpers import run_in_threads

BACKENDS = ["memory", "sqlite", "redis"]

A1 = Authorship(("model-a",), 1, 1_700_000_000.25, "conv-1")
A2 = Authorship(("model-b", "model-a"), 2, 1_700_000_001.5, "conv-1")
MARKER = Authorship((), 3, 1_700_000_002.0)  # collision marker: attributes nothing


def _build(backend: str, tmp_path: Path, ttl_s: float = 3600.0) -> AttributionStore:
    if backend == "redis":
        require_redis()
    cfg = StoreConfig(
        backend=backend,  # type: ignore[arg-type]
        path=str(tmp_path / "store.db"),
        key_prefix=f"hm-contract:{uuid.uuid4().hex}:",
        ttl_s=ttl_s,
        timeout_s=1.0,  # the contract, not fail-open (tested in test_redis), on a possibly busy host
    )
    return make_store(cfg)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AttributionStore]:
    s = _build(request.param, tmp_path)
    yield s
    s.close()


def test_is_an_attribution_store(store: AttributionStore) -> None:
    """Every backend satisfies the runtime-checkable protocol."""
    assert isinstance(store, AttributionStore)


def test_get_many_answers_in_key_order_with_none_for_missing(store: AttributionStore) -> None:
    """One answer per key, in the order asked, None where nothing was stored; [] for []."""
    store.put_many([("k1", A1), ("k2", A2)])
    assert store.get_many(["k2", "nope", "k1", "k2"]) == [A2, None, A1, A2]
    assert store.get_many([]) == []


def test_every_authorship_field_round_trips(store: AttributionStore) -> None:
    """Several authors in order, depth, float created_at, conversation id and the empty marker."""
    store.put_many([("a", A2), ("m", MARKER)])
    got = store.get_many(["a", "m"])
    assert got == [A2, MARKER]
    assert got[0] is not None and got[0].authors == ("model-b", "model-a")


def test_put_overwrites(store: AttributionStore) -> None:
    """A second put of the same key replaces the value."""
    store.put_many([("k", A1)])
    store.put_many([("k", A2)])
    assert store.get_many(["k"]) == [A2]


def test_unusual_keys(store: AttributionStore) -> None:
    """Keys with separators, unicode and 200 characters are distinct and exact."""
    keys = ["a:b:c", "é-ключ-鍵", "x" * 200, "a:b"]
    store.put_many([(k, Authorship((f"m{i}",), i + 1, 1.0)) for i, k in enumerate(keys)])
    assert [a.authors[0] if a else None for a in store.get_many(keys)] == ["m0", "m1", "m2", "m3"]


def test_state_round_trip_replace_and_isolation(store: AttributionStore) -> None:
    """State: None until written, nested JSON round-trips, put replaces, caller mutations don't leak."""
    assert store.get_state("c1") is None
    state: dict[str, object] = {"last": {"fmt": "pass", "len": "fail"}, "rules": ["a", "b"], "n": 3}
    store.put_state("c1", state)
    state["n"] = 99  # the store kept its own copy
    assert store.get_state("c1") == {"last": {"fmt": "pass", "len": "fail"}, "rules": ["a", "b"], "n": 3}
    store.put_state("c1", {"n": 4})
    assert store.get_state("c1") == {"n": 4}
    assert store.get_state("c2") is None


def test_state_and_fingerprints_do_not_collide(store: AttributionStore) -> None:
    """A conversation id equal to a fingerprint key is a different entry."""
    store.put_many([("same", A1)])
    store.put_state("same", {"x": 1})
    assert store.get_many(["same"]) == [A1]
    assert store.get_state("same") == {"x": 1}


@pytest.mark.parametrize("backend", BACKENDS)
def test_entries_expire_after_ttl(backend: str, tmp_path: Path) -> None:
    """Attributions and state written with ttl_s=0.3 are gone 0.5 s later (real clock)."""
    s = _build(backend, tmp_path, ttl_s=0.3)
    s.put_many([("k", A1)])
    s.put_state("c", {"x": 1})
    assert s.get_many(["k"]) == [A1]
    time.sleep(0.5)
    assert s.get_many(["k"]) == [None]
    assert s.get_state("c") is None
    s.close()


def test_threads_share_a_store(store: AttributionStore) -> None:
    """Eight threads writing and reading their own keys see exactly their own values."""

    def work(t: int) -> None:
        for i in range(25):
            key, value = f"t{t}-{i}", Authorship((f"m{t}",), i + 1, float(i), f"c{t}")
            store.put_many([(key, value)])
            assert store.get_many([key]) == [value]
            store.put_state(f"c{t}", {"i": i})
            assert store.get_state(f"c{t}") == {"i": i}

    assert run_in_threads(work, 8) == []
