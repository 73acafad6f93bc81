"""Bounded queues drained by worker threads: the turn pipeline and one dispatcher per exporter."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_log = logging.getLogger("handoffmon.pipeline")


class ByteBudget:
    """The bytes queued work holds, bounded: what a turn takes with ``take`` is given back with
    ``give``, once the work that held it is done. Thread-safe (taken on the request path, given
    back on the attribution thread).

    Args:
        limit: the most bytes held at once.
    """

    __slots__ = ("_lock", "held", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        """Hold ``n`` more bytes; False (nothing held) when that would pass the limit."""
        with self._lock:
            if self.held + n > self.limit:
                return False
            self.held += n
            return True

    def give(self, n: int) -> None:
        """Give back ``n`` bytes taken earlier."""
        if n:
            with self._lock:
                self.held -= n


class WorkerPool(Generic[T]):
    """``workers`` threads, each draining its own bounded deque (a :class:`DequeWorker`).

    Items are sharded by a key (the conversation id) so one conversation's turns are
    processed in order by one thread, which the per-conversation state relies on.

    Each shard polls while traffic flows instead of being woken per item: under ``serve``
    a ``queue.Queue`` put cost a futex wake-up (``Condition.notify``) with the GIL held on
    every turn at every stage, which profiled at ~0.2 ms of CPU each on a loaded 2-core VM
    (issue 21). Items wait at most one poll interval (2 ms) longer to be handled.

    Args:
        handler: processes one item; exceptions are passed to ``on_error``.
        workers: number of threads (and queues).
        queue_size: total capacity, split evenly across the queues.
        on_error: called with any exception ``handler`` raised.
        on_idle: called when a queue runs empty (and every ``idle_every`` items otherwise).
        name: thread name prefix.
        start: start the threads now (else call :meth:`start`; items queue up meanwhile).
        driven: one queue and no thread of its own: another worker's thread calls
            :meth:`drain` (``DequeWorker(after=pool.drain)``; see ``DequeWorker``'s ``driven``).
        batch: handles the items queued at once, up to ``max_batch`` in order, instead of
            ``handler`` one by one (see ``DequeWorker``'s ``batch``).
        max_batch: the most items one ``batch`` call takes.
    """

    def __init__(
        self,
        handler: Callable[[T], None],
        *,
        workers: int = 1,
        queue_size: int = 10_000,
        on_error: Callable[[BaseException], None],
        on_idle: Callable[[], None] | None = None,
        idle_every: int = 1000,
        name: str = "handoffmon-worker",
        start: bool = True,
        driven: bool = False,
        batch: Callable[[list[T]], None] | None = None,
        max_batch: int = 64,
    ) -> None:
        self._handler = handler
        self._batch = batch
        self._on_error = on_error
        self._on_idle = on_idle
        self._idle_every = idle_every
        if driven and workers != 1:
            raise ValueError("a driven pool has one queue")
        per = max(1, queue_size // workers)
        self._shards: list[DequeWorker[T]] = []
        for i in range(workers):
            shard: DequeWorker[T] = DequeWorker(
                self._handle_one(),
                queue_size=per,
                on_error=on_error,
                name=f"{name}-{i}",
                start=False,
                driven=driven,
                batch=self._handle_batch() if batch is not None else None,
                max_batch=max_batch,
            )
            self._shards.append(shard)
        self._started = False
        if start:
            self.start()

    def _handle_one(self) -> Callable[[T], None]:
        """One shard's handler: the item, then ``on_idle`` when its deque ran empty."""
        return self._with_idle(self._handler, batched=False)

    def _handle_batch(self) -> Callable[[list[T]], None]:
        """One shard's batch handler: the items, then ``on_idle`` as :meth:`_handle_one`."""
        assert self._batch is not None
        return self._with_idle(self._batch, batched=True)

    def _with_idle(self, fn: Callable[[Any], None], *, batched: bool) -> Callable[[Any], None]:
        """``fn`` guarded, then ``on_idle`` when the shard being built ran empty, and every
        ``idle_every`` items otherwise (``batched``: ``fn`` takes a list of items)."""
        since_idle = 0
        shards = self._shards
        index = len(shards)

        def handle(x: Any) -> None:
            nonlocal since_idle
            _guarded(fn, self._on_error, x)
            since_idle += len(x) if batched else 1
            if self._on_idle is not None and (
                since_idle >= self._idle_every or not shards[index].has_items()
            ):
                since_idle = 0
                _guarded(self._on_idle, self._on_error)

        return handle

    def start(self) -> None:
        """Start the worker threads (idempotent)."""
        if self._started:
            return
        self._started = True
        for w in self._shards:
            w.start()

    def drain(self, stop: Callable[[], bool] | None = None) -> None:
        """Handle the queued items on the calling thread (a ``driven`` pool: its driver's
        ``after`` hook) until none is left or ``stop()`` is true (checked before each)."""
        for w in self._shards:
            w.run_pending(stop)

    def submit(self, item: T, key: str = "") -> bool:
        """Enqueue without blocking; False when the queue is full or the pool is closed."""
        shards = self._shards
        shard = shards[hash(key) % len(shards)] if len(shards) > 1 else shards[0]
        return shard.submit(item)

    def pending(self) -> int:
        """Items queued or in progress (``Monitor.backlogged`` asks on the request path: one
        shard, the default, is read without a generator)."""
        shards = self._shards
        if len(shards) == 1:
            return shards[0].pending()
        return sum(w.pending() for w in shards)

    def after_fork(self) -> int:
        """In a forked child: every shard's :meth:`DequeWorker.after_fork`; the items forgotten."""
        return sum(w.after_fork() for w in self._shards)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued item has been processed; False on timeout.

        A pool whose threads were never started cannot drain: False at once if it holds items.
        """
        if not self._started:
            return self.pending() == 0
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        return all(w.flush(_left(deadline)) for w in self._shards)

    def close(self, timeout_s: float | None = None) -> bool:
        """Stop accepting items, drain the queues and join the threads; False on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self.start()  # a never-started pool still drains what it queued
        for w in self._shards:
            w.stop_accepting()
        return all([w.close(_left(deadline)) for w in self._shards])

    def abandon(self) -> int:
        """Every shard's :meth:`DequeWorker.abandon`: the items none of them will handle."""
        return sum(w.abandon() for w in self._shards)


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _guarded(fn: Callable[..., None], on_error: Callable[[BaseException], None], *args: object) -> None:
    """``fn(*args)``; an exception goes to ``on_error``: the pipeline keeps running whatever a
    stage, a hook or a handler does."""
    try:
        fn(*args)
    except Exception as exc:
        try:
            on_error(exc)
        except Exception:  # pragma: no cover - error accounting itself failed
            _log.exception("handoffmon error handler failed")


class DequeWorker(Generic[T]):
    """One thread draining a bounded deque: ``submit`` takes no lock while the thread is busy.

    For the attribution stage, where every request submits: a ``queue.Queue`` takes its
    mutex on every put, and when the worker thread is descheduled holding that mutex, the
    request thread blocks on it and then waits for the GIL (a lock convoy that costs
    hundreds of µs under saturation). ``deque.append`` / ``popleft`` are atomic; the
    wake-up event is only touched when the worker has gone to sleep.

    Waking a sleeping thread is a futex system call that cost the request path ~10-20 µs
    p50 per paced call (most of the wrapper's added latency, issue 21). So after its last
    item the worker keeps polling every ``poll_s`` for ``linger_s`` before it sleeps:
    while traffic flows, ``submit`` is an append; only the first item after a quiet spell
    pays the wake-up. Items wait at most ``poll_s`` longer to be handled. The polls are
    plain sleeps (``wake_at`` items waiting set the event, which a sleeping worker and the
    next poll see; a poll is not cut short).

    Args:
        handler: processes one item; exceptions are passed to ``on_error``.
        queue_size: bound of the deque (``submit`` returns False beyond it).
        on_error: called with any exception ``handler`` raised.
        name: thread name.
        start: start the thread now (else :meth:`start`; items queue up meanwhile).
        poll_s: polling interval while traffic flows.
        linger_s: how long the worker keeps polling after its last item before it sleeps.
        wake_at: queued items at which ``submit`` sets the wake-up event (a polling worker
            sees it at its next poll; kept for callers that tune it).
        driven: no thread: whoever drives it calls :meth:`run_pending` (and :meth:`close`
            handles what is left on the closing thread).
        after: called on this worker's thread whenever its deque runs empty (after it
            handled items), with :meth:`has_items` as a ``stop`` to return by as soon as an
            item waits again, and once more, with ``None``, before the thread ends. The
            attribution thread drives the check queue through it (``pool.drain``): it
            attributes first and checks while no turn waits, so a check backlog waits in the
            check queue (``pipeline.queue_size``) as it does with a check thread, not in
            its own, smaller queue.
        batch: called with every item queued when the worker looks, up to ``max_batch``, in
            order, instead of ``handler`` per item: for a stage whose cost is round trips
            to a store (one per batch instead of one per item). An item waits no longer
            than one by one: the batch is what had queued while the previous one ran.
        max_batch: the most items one ``batch`` call takes.
    """

    def __init__(
        self,
        handler: Callable[[T], None],
        *,
        queue_size: int,
        on_error: Callable[[BaseException], None],
        name: str = "handoffmon-worker",
        start: bool = True,
        poll_s: float = 0.002,
        linger_s: float = 0.5,
        wake_at: int = 32,
        driven: bool = False,
        after: Callable[[Callable[[], bool] | None], None] | None = None,
        batch: Callable[[list[T]], None] | None = None,
        max_batch: int = 64,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._handler = handler
        self._batch = batch
        self._max_batch = max_batch
        self._driven = driven
        self._after = after
        # one drainer at a time: the driver, or close() on the closing thread
        self._drain_lock = threading.Lock()
        self._on_error = on_error
        self._max = queue_size
        self._items: deque[T] = deque()
        self._wake = threading.Event()
        self._sleeping = True  # in an untimed wait: submit must wake it
        self._poll_s = poll_s
        self._linger_s = linger_s
        self._wake_at = wake_at
        self._busy = 0  # items taken off the deque and not yet handled
        self._closed = False
        self._started = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        if start:
            self.start()

    def start(self) -> None:
        """Start the thread (idempotent; a driven worker has none)."""
        if self._started:
            return
        self._started = True
        if not self._driven:
            self._thread.start()

    def run_pending(self, stop: Callable[[], bool] | None = None) -> int:
        """Handle the queued items on the calling thread until the deque is empty or
        ``stop()`` is true (checked before each item); how many.

        For a ``driven`` worker: its driver's thread, or :meth:`close` (one at a time)."""
        with self._drain_lock:
            return self._run_pending(stop)

    def _run_pending(self, stop: Callable[[], bool] | None) -> int:
        items, handler, batch, on_error = self._items, self._handler, self._batch, self._on_error
        n = 0
        while True:
            if stop is not None and items and stop():
                return n
            self._busy = 1  # before popleft: an item in flight is always counted as pending
            try:
                if batch is None:
                    _guarded(handler, on_error, items.popleft())  # IndexError: only popleft's
                    n += 1
                else:
                    n += self._handle_batch()
            except IndexError:
                return n
            finally:
                self._busy = 0

    def _handle_batch(self) -> int:
        """Take the queued items off the deque, up to ``max_batch``, and hand them to ``batch``;
        how many.

        Raises:
            IndexError: the deque was empty.
        """
        items = self._items
        taken = [items.popleft()]
        batch = self._batch
        assert batch is not None
        limit = self._max_batch
        while len(taken) < limit and items:  # one drainer at a time: the deque only grows meanwhile
            taken.append(items.popleft())
        self._busy = len(taken)
        _guarded(batch, self._on_error, taken)
        return len(taken)

    def submit(self, item: T) -> bool:
        """Enqueue without blocking; False when full or closed."""
        items = self._items
        if self._closed or len(items) >= self._max:
            return False
        items.append(item)
        # after the append: a worker going to sleep sets _sleeping, then looks at the deque
        if (self._sleeping or len(items) >= self._wake_at) and not self._wake.is_set():
            self._wake.set()
        return True

    def pending(self) -> int:
        """Items queued or in progress."""
        return len(self._items) + self._busy

    def has_items(self) -> bool:
        """Items are queued (not counting one in progress)."""
        return bool(self._items)

    def after_fork(self) -> int:
        """In a forked child (``pipeline.fork``), where this worker's thread does not exist:
        forget the parent's items (the parent handles them) and start the thread again when it
        ran; how many items were forgotten."""
        dropped = len(self._items) + self._busy
        self._items.clear()
        self._busy = 0
        self._wake = threading.Event()
        self._sleeping = True
        self._drain_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=self._thread.name, daemon=True)
        if self._started and not self._driven and not self._closed:
            self._thread.start()
        return dropped

    def stop_accepting(self) -> None:
        """Refuse new items from now on; queued ones are still handled (see :meth:`close`)."""
        self._closed = True
        self._wake.set()

    def _run(self) -> None:
        items, wake, sleep = self._items, self._wake, time.sleep
        after, since_after, has_items = self._after, 0, self.has_items
        handler, batch, on_error = self._handler, self._batch, self._on_error
        idle_since = 0.0
        self._sleeping = False  # polling from the start
        while True:
            self._busy = 1  # before popleft: an item in flight is always counted as pending
            try:
                if batch is None:
                    item = items.popleft()
                    handled = 1
                else:
                    handled = self._handle_batch()
            except IndexError:
                self._busy = 0
                if after is not None and since_after:
                    # Only this thread's items feed the hook's queue, so it is empty again
                    # unless the hook returned for a waiting item, which is handled next
                    # (and calls the hook again).
                    since_after = 0
                    _guarded(after, self._on_error, has_items)
                    continue  # the hook took a while: look at the deque again
                if wake.is_set():  # clear() takes the event's lock: only when there is something to clear
                    wake.clear()
                if items:  # appended between popleft and clear: its submit saw the event set
                    continue
                if self._closed:
                    if after is not None:
                        _guarded(after, self._on_error, None)
                    return
                now = time.monotonic()
                if not idle_since:
                    idle_since = now
                if now - idle_since < self._linger_s:
                    # A plain sleep: Event.wait(timeout) builds a Condition waiter and takes two
                    # locks per poll, ~2x the thread CPU of a sleep (51-62 vs 27 us per 2 ms
                    # poll on the 2-core VM), and a busy worker polls about once per turn.
                    sleep(self._poll_s)
                    continue
                self._sleeping = True
                if not items and not self._closed:
                    self._wake.wait()
                self._sleeping = False
                idle_since = 0.0
                continue
            idle_since = 0.0
            since_after += handled
            if batch is None:
                try:
                    _guarded(handler, on_error, item)
                finally:
                    self._busy = 0
            else:
                self._busy = 0

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued item has been processed; False on timeout."""
        if not self._started:
            return self.pending() == 0
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self.pending():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.0005)
        return True

    def close(self, timeout_s: float | None = None) -> bool:
        """Stop accepting items, drain the deque and join the thread; False on timeout.

        A driven worker handles what is still queued on the calling thread (its driver
        has stopped by then)."""
        self.start()  # a never-started worker still drains what it queued
        self._closed = True
        if self._driven:
            # the driver has stopped, or (its close timed out) is still draining: wait for it
            if not self._drain_lock.acquire(timeout=-1 if timeout_s is None else timeout_s):
                return False
            try:
                self._run_pending(None)
            finally:
                self._drain_lock.release()
            return True
        self._wake.set()
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def abandon(self) -> int:
        """After a :meth:`close` that ran out of time: refuse new items and take the queued ones
        off the deque, so the thread handles none of them later; how many. The item the thread
        is handling (``pending`` counts it) is not among them: it ends where its handler leaves
        it. ``popleft`` is atomic, so an item is either taken here or handled, never both."""
        self._closed = True
        items, n = self._items, 0
        while True:
            try:
                items.popleft()
            except IndexError:
                return n
            n += 1
