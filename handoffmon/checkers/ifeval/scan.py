"""Linear-time equivalents of reference IFEval regexes that backtrack quadratically.

``\\[.*?\\]``, ``^\\s*\\*[^\\*].*$`` / ``^\\s*-.*$`` (multiline) and ``<<[^\\n]+>>`` rescan the
rest of a line (or a whitespace run) from every start position, so a reply of 100,000
``[`` or newlines takes minutes under Python's ``re``. These scanners give the same
counts in one pass (tests compare them with the regexes on random strings).
"""

from __future__ import annotations

from collections.abc import Callable


def count_placeholders(text: str) -> int:
    """``len(re.findall(r"\\[.*?\\]", text))``."""
    count, i, n = 0, 0, len(text)
    while True:
        i = text.find("[", i)
        if i < 0:
            return count
        line_end = text.find("\n", i)
        line_end = n if line_end < 0 else line_end
        close = text.find("]", i + 1, line_end)
        if close >= 0:
            count, i = count + 1, close + 1
        else:
            i = line_end  # no ']' before the newline: no '[' on this line can close


def _star_item(text: str, q: int) -> int:
    """``\\*[^\\*]`` at q: where ``.*$`` starts, or -1."""
    return q + 2 if text.startswith("*", q) and q + 1 < len(text) and text[q + 1] != "*" else -1


def _dash_item(text: str, q: int) -> int:
    """``-`` at q: where ``.*$`` starts, or -1."""
    return q + 1 if text.startswith("-", q) else -1


def _count_line_items(text: str, head: Callable[[str, int], int]) -> int:
    """Matches of ``^\\s*<head>.*$`` (MULTILINE) that ``re.findall`` returns.

    At a line start the greedy ``\\s*`` (newlines included) runs to the first non-space
    character ``q``; backtracking cannot help because every shorter run ends on a space.
    ``q`` is reused for every line start inside the same whitespace run, which keeps
    the scan linear.
    """
    n = len(text)
    count = pos = 0
    q = -1
    p = 0  # a line start: 0 or just after a newline
    while True:
        if p >= pos:  # findall resumes where the previous match ended
            if q < p:
                q = p
                while q < n and text[q].isspace():
                    q += 1
            start = head(text, q) if q < n else -1
            if start >= 0:
                end = text.find("\n", start)
                pos = n if end < 0 else end
                count += 1
        nl = text.find("\n", p)
        if nl < 0:
            return count
        p = nl + 1


def count_bullets(text: str) -> int:
    """``len(findall(r"^\\s*\\*[^\\*].*$", M)) + len(findall(r"^\\s*-.*$", M))``."""
    return _count_line_items(text, _star_item) + _count_line_items(text, _dash_item)


def has_title(text: str) -> bool:
    """Some ``<<[^\\n]+>>`` match has text left after stripping ``<``, ``>`` and spaces."""
    for line in text.split("\n"):
        i = line.find("<<")
        if i < 0:
            continue
        j = line.rfind(">>")
        if j >= i + 3 and line[i : j + 2].lstrip("<").rstrip(">").strip():
            return True
    return False
