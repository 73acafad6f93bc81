"""SSE framing: split a ``text/event-stream`` into JSON events for a folder (``ChunkFolder``,
or a typed-event folder of ``ingress.apis``).

For ``serve``, and for the LiteLLM Proxy callback when the proxy hands it a stream's raw bytes
(the Anthropic Messages API). The bytes sent on to the client are never touched; this reads a
copy. Folding events into a reply is the folders' job, the same in every adapter.
"""

from __future__ import annotations

import json

from handoffmon.ingress.chunks import MAX_REPLY_CHARS, ChunkFolder, Folder, StreamOutcome


class SSEChunks:
    """Feed it the raw bytes of an OpenAI-style event stream; read the folded reply at the end.

    Events may be split across reads at any byte; ``data: [DONE]`` sets ``done`` (so does
    the folder's own last event: a Responses stream's ``response.completed``); events
    that are not JSON objects are counted in ``bad_events`` and skipped, never raised.

    Args:
        max_buffer_bytes: an unterminated event longer than this is dropped (bounded memory)
            and the outcome is ``too_large``: the reply lacks that event's text.
        max_chars: the folder's cap on the reply's text and arguments (``ChunkFolder``).
        folder: folds the events (default: a ``ChunkFolder`` of ``max_chars``).
    """

    def __init__(
        self, max_buffer_bytes: int = 1 << 20, max_chars: int = MAX_REPLY_CHARS, folder: Folder | None = None
    ) -> None:
        self._parts: list[bytes] = []
        """The unterminated event's bytes so far (CRLF already folded to LF), unjoined."""
        self._size = 0
        self._cr = False
        """The last read ended in ``\r`` (read as a line end, as the SSE format reads a lone
        CR): an ``\n`` opening the next read is the rest of that CRLF."""
        self._max_buffer = max_buffer_bytes
        self.folder: Folder = folder if folder is not None else ChunkFolder(max_chars)
        self.done = False
        self.events = 0
        self.bad_events = 0
        self.overflowed = False
        """An event past ``max_buffer_bytes`` was dropped."""

    def feed(self, data: bytes) -> None:
        """Consume the next bytes of the stream.

        Only the new bytes are scanned for the blank line that ends an event, and the
        unterminated event is joined only once that comes: an event of N bytes arriving in
        small reads costs O(N), not O(N^2) (a 0.9 MB event in 1,460-byte reads held the
        serving loop for 0.65 s when the whole buffer was rescanned on every read).
        """
        if not data:
            return
        if self._cr and data.startswith(b"\n"):  # the LF of a CRLF split between reads
            data = data[1:]
        self._cr = data.endswith(b"\r")
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")  # a lone CR ends a line too
        if not data:
            return
        parts = self._parts
        joined = bool(parts) and parts[-1].endswith(b"\n") and data.startswith(b"\n")
        if not joined and b"\n\n" not in data:
            parts.append(data)
            self._size += len(data)
            if self._size > self._max_buffer:
                self.overflowed = True
                parts.clear()
                self._size = 0
            return
        buf = b"".join(parts) + data if parts else data
        *events, rest = buf.split(b"\n\n")
        parts.clear()
        self._size = 0
        if len(rest) > self._max_buffer:
            self.overflowed = True
        elif rest:
            parts.append(rest)
            self._size = len(rest)
        for event in events:
            self._event(event)

    def close(self) -> None:
        """End of stream: handle a last event that had no blank line after it."""
        buf = b"".join(self._parts)
        self._parts.clear()
        self._size = 0
        self._cr = False
        if buf.strip():
            self._event(buf)

    def _event(self, event: bytes) -> None:
        lines = [ln[5:].lstrip() for ln in event.split(b"\n") if ln.startswith(b"data:")]
        if not lines:
            return
        payload = b"\n".join(lines)
        if payload == b"[DONE]":
            self.done = True
            return
        self.events += 1
        try:
            chunk = json.loads(payload)
        except (ValueError, RecursionError):
            self.bad_events += 1
            return
        if isinstance(chunk, dict):
            self.folder.feed(chunk)
            if getattr(self.folder, "done", False):
                self.done = True
        else:
            self.bad_events += 1

    def outcome(self, *, completed: bool) -> StreamOutcome:
        """The folded reply; ``odd`` also counts events that were not JSON objects;
        ``too_large`` also when an event was dropped for its size (the reply would lack it)."""
        out = self.folder.outcome(completed=completed)
        return out._replace(odd=out.odd + self.bad_events, too_large=out.too_large or self.overflowed)


class SSEFolder:
    """A ``Folder`` for streams that arrive as raw SSE bytes (LiteLLM's Anthropic Messages
    streams): bytes are framed by :class:`SSEChunks` into ``folder``; decoded events (an SDK's)
    go to ``folder`` as they are. Never raises."""

    def __init__(self, folder: Folder) -> None:
        self.folder = folder
        self._sse = SSEChunks(folder=folder)

    @property
    def done(self) -> bool:
        """The stream's last event was seen."""
        return bool(getattr(self.folder, "done", False))

    def feed(self, chunk: object) -> None:
        """Take one chunk: raw bytes (or text) of the stream, or one decoded event."""
        if isinstance(chunk, (bytes, bytearray, str)):
            self._sse.feed(chunk.encode("utf-8", "surrogatepass") if isinstance(chunk, str) else bytes(chunk))
        else:
            self.folder.feed(chunk)

    def raised(self, exc: BaseException) -> None:
        """The stream raised ``exc``: told to ``folder``."""
        self.folder.raised(exc)

    def outcome(self, *, completed: bool) -> StreamOutcome:
        """The folded reply (an event with no blank line after it is read first)."""
        self._sse.close()
        return self.folder.outcome(completed=completed)
