"""Small inline-SVG chart primitives: colour scales, heatmap, interval bars, curves, bubbles."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape

NEG = (192, 57, 43)
"""Colour of harmful effects (negative Δ)."""
POS = (37, 99, 180)
"""Colour of helpful effects (positive Δ)."""
MID = (247, 247, 245)
SPARSE_N = 30
"""Depth buckets with fewer checked turns are drawn faded (wide, noisy intervals)."""
PALETTE = ("#2563b4", "#d9480f", "#2b8a3e", "#7048e8", "#c2255c", "#0b7285", "#e67700", "#495057", "#5c940d")
"""Series colours (models)."""
MAX_TICK_CHARS = 32
"""Model names longer than this are shortened in chart labels (middle ellipsis; the full name
is the label's tooltip): a name sets column widths and margins, and a Bedrock ARN (~100
characters) made each of 30 heatmap columns ~700 px wide."""
CHAR_PX = 7
"""About the width of one tick-font character, in px."""
_FSI, _PDI = "\u2068", "\u2069"


def finite(x: float | None) -> bool:
    """Whether ``x`` is a real number (not None, NaN or inf)."""
    return x is not None and not (math.isnan(x) or math.isinf(x))


def diverging(value: float, scale: float) -> str:
    """Colour of ``value`` on a red-white-blue scale saturating at ±``scale``."""
    if not finite(value) or scale <= 0:
        return "#e9ecef"
    t = max(-1.0, min(1.0, value / scale))
    end = POS if t > 0 else NEG
    a = abs(t) ** 0.8
    rgb = tuple(round(m + (e - m) * a) for m, e in zip(MID, end, strict=True))
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def text_on(fill: str) -> str:
    """Readable text colour on a fill."""
    r, g, b = (int(fill[i : i + 2], 16) for i in (1, 3, 5))
    return "#ffffff" if 0.299 * r + 0.587 * g + 0.114 * b < 140 else "#1f2328"


def pct(x: float, digits: int = 0, signed: bool = False) -> str:
    """``0.123`` → ``12%`` (``+12`` pp style when ``signed``); NaN → ``–``."""
    if not finite(x):
        return "–"
    v = 100 * x
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}%"


def _unwrap(name: str) -> tuple[str, bool]:
    """``name`` without its bidi isolate (FSI … PDI), and whether it had one."""
    wrapped = len(name) > 1 and name[0] == _FSI and name[-1] == _PDI
    return (name[1:-1], True) if wrapped else (name, False)


def _wrap(short: str, wrapped: bool) -> str:
    return f"{_FSI}{short}{_PDI}" if wrapped else short


def tick_name(name: str) -> str:
    """``name`` as chart labels show it: at most ``MAX_TICK_CHARS`` characters, the start and the
    end kept (names differ most in their version suffix), a bidi isolate (FSI … PDI) kept whole."""
    inner, wrapped = _unwrap(name)
    if len(inner) <= MAX_TICK_CHARS:
        return name
    head = MAX_TICK_CHARS // 3
    return _wrap(f"{inner[:head]}…{inner[head + 1 - MAX_TICK_CHARS :]}", wrapped)


def _shared_start(a: str, b: str) -> int:
    """Characters ``a`` and ``b`` share at their start."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _where_it_differs(name: str, others: Sequence[str]) -> str:
    """``name`` shortened around the first character no other of ``others`` shares with it
    (after a common start), keeping 5 characters of its start and 13 of its end."""
    inner, wrapped = _unwrap(name)
    rest = [_unwrap(o)[0] for o in others]
    at = max(_shared_start(inner, o) for o in rest)
    tail = MAX_TICK_CHARS - 5 - 12 - 2
    return _wrap(f"{inner[:5]}…{inner[max(at - 4, 5) : max(at - 4, 5) + 12]}…{inner[-tail:]}", wrapped)


def tick_names(names: Iterable[str]) -> dict[str, str]:
    """Each of ``names`` → its chart label: ``tick_name``, except where two names shorten alike
    (a model's Bedrock profiles in two regions differ only mid-name): those show the stretch
    where they first differ, and are numbered if they still read alike."""
    unique = list(dict.fromkeys(names))
    shown = {n: tick_name(n) for n in unique}
    alike: dict[str, list[str]] = {}
    for n in unique:
        alike.setdefault(shown[n], []).append(n)
    for group in alike.values():
        if len(group) > 1:
            for n in group:
                shown[n] = _where_it_differs(n, [o for o in group if o != n])
    seen: dict[str, int] = {}
    for n in unique:
        label = shown[n]
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            shown[n] = f"{label} #{seen[label]}"
    return shown


def _tick(x: float, y: float, name: str, label: str, *, anchor: str, extra: str = "") -> str:
    """A model name as the tick ``label`` (``tick_names``), the full name its tooltip when they differ."""
    title = f"<title>{escape(name)}</title>" if label != name else ""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" class="tick"{extra}>{title}'
        f"{escape(label)}</text>"
    )


def _widest(labels: Iterable[str]) -> int:
    """Characters of the longest of ``labels``."""
    return max((len(label) for label in labels), default=0)


def _pair_axes(
    rows: Sequence[str], cols: Sequence[str], cw: float, top: float
) -> tuple[dict[str, str], float, float, list[str], float]:
    """A pair chart's labels (``tick_names`` of rows and columns), its top, its row-label
    margin, the column ticks and the px they reach right of the last column.

    Column labels are centred over columns ``cw`` wide, or turned 45° when the widest does not
    fit (columns then keep their width whatever the names; the top is raised to make room)."""
    labels = tick_names([*rows, *cols])
    widest = _widest(labels[c] for c in cols)
    turned = CHAR_PX * widest + 16 > cw
    if turned:
        top += _turned_extent(widest)
    left = max(96, CHAR_PX * _widest(labels[r] for r in rows) + 24)
    ticks = []
    for j, col in enumerate(cols):
        x = left + cw * j + cw / 2
        extra = f' transform="rotate(-45 {x:.1f} {top - 10:.1f})"' if turned else ""
        anchor = "start" if turned else "middle"
        ticks.append(_tick(x, top - 10, col, labels[col], anchor=anchor, extra=extra))
    overhang = _turned_extent(widest) - cw / 2 if turned else 0.0
    return labels, top, left, ticks, overhang


def _turned_extent(widest: int) -> int:
    """How far (px, up and right) a column label of ``widest`` characters turned 45° reaches."""
    return math.ceil(0.71 * CHAR_PX * widest) + 4


def _t(x: float, y: float, s: str, *, cls: str = "", anchor: str = "start", extra: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{c}{extra}>{escape(s)}</text>'


def _open(kind: str, w: float, h: float, label: str) -> str:
    """Opening tag of a chart: an image with an accessible name (screen readers announce it)."""
    return (
        f'<svg class="chart {kind}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
        f'aria-label="{escape(label)}">'
    )


@dataclass(frozen=True)
class HeatCell:
    """One cell of the pair heatmap."""

    value: float
    label: str
    tooltip: str
    observed: bool
    significant: bool


def heatmap(
    rows: Sequence[str], cols: Sequence[str], cells: dict[tuple[str, str], HeatCell], scale: float
) -> str:
    """Square heatmap, rows = prefix models, columns = suffix models; diagonal shown as baseline.

    The row-label margin widens with the longest model name (about 7 px a character at the
    tick font); column labels too long for a column are turned 45°, so columns keep their
    width; names past ``MAX_TICK_CHARS`` are shortened (``tick_names``).
    """
    cw, ch = 74, 46
    labels, top, left, ticks, overhang = _pair_axes(rows, cols, cw, 58)
    title_x = max(left + cw * len(cols) / 2, 150)  # the axis title fits, even over a few columns
    w = max(left + cw * len(cols) + 10 + round(overhang), round(title_x + 145))
    h = max(top + ch * len(rows) + 10, round(top + ch * len(rows) / 2 + 56))  # so does the rotated one
    out = [
        _open(
            "heatmap",
            w,
            h,
            "Handoff effect by pair: rows prefix model A, columns suffix model B, cell Δ in pp",
        )
    ]
    out.append(
        _t(
            title_x,
            16,
            "suffix model B (continues the conversation) →",
            cls="axis-title",
            anchor="middle",
        )
    )
    out.extend(ticks)
    for i, row in enumerate(rows):
        y = top + ch * i
        out.append(_tick(left - 8, y + ch / 2 + 4, row, labels[row], anchor="end"))
        for j, col in enumerate(cols):
            x = left + cw * j
            out.append(_heat_cell(x, y, cw, ch, row, col, cells.get((row, col)), scale))
    out.append(
        _t(
            12,
            top + ch * len(rows) / 2,
            "prefix model A →",
            cls="axis-title",
            anchor="middle",
            extra=f' transform="rotate(-90 12 {top + ch * len(rows) / 2:.0f})"',
        )
    )
    out.append("</svg>")
    return "".join(out)


def _heat_cell(
    x: float, y: float, cw: float, ch: float, row: str, col: str, cell: HeatCell | None, scale: float
) -> str:
    if row == col:
        return (
            f'<g><rect x="{x + 1}" y="{y + 1}" width="{cw - 2}" height="{ch - 2}" rx="6" class="diag"/>'
            f"<title>{escape(row)} → {escape(col)}: no-switch baseline</title>"
            + _t(x + cw / 2, y + ch / 2 + 4, "baseline", cls="diag-label", anchor="middle")
            + "</g>"
        )
    if cell is None:
        return f'<rect x="{x + 1}" y="{y + 1}" width="{cw - 2}" height="{ch - 2}" rx="6" class="empty"/>'
    if not cell.observed and not finite(cell.value):
        return (
            f'<g class="na"><rect x="{x + 1}" y="{y + 1}" width="{cw - 2}" height="{ch - 2}" rx="6" '
            f'class="empty"/><title>{escape(cell.tooltip)}</title>'
            + _t(x + cw / 2, y + ch / 2 + 4, cell.label, cls="diag-label", anchor="middle")
            + "</g>"
        )
    fill = diverging(cell.value, scale) if cell.observed else "url(#hatch)"
    color = text_on(diverging(cell.value, scale)) if cell.observed else "#495057"
    cls = "cell sig" if cell.significant else "cell"
    mark = " ★" if cell.significant else ""
    label = cell.label + mark if cell.observed else f"({cell.label})"
    return (
        f'<g class="{cls}"><rect x="{x + 1}" y="{y + 1}" width="{cw - 2}" height="{ch - 2}" rx="6" '
        f'fill="{fill}"/><title>{escape(cell.tooltip)}</title>'
        + _t(x + cw / 2, y + ch / 2 + 4, label, cls="cell-label", anchor="middle", extra=f' fill="{color}"')
        + "</g>"
    )


def legend_scale(scale: float, width: int = 260) -> str:
    """Colour bar for the heatmap."""
    stops = "".join(
        f'<stop offset="{i / 10:.1f}" stop-color="{diverging(scale * (i - 5) / 5, scale)}"/>'
        for i in range(11)
    )
    return (
        f'<svg class="legend" viewBox="0 0 {width} 34" width="{width}" height="34" role="img" '
        f'aria-label="colour scale from {pct(-scale, 0, True)} pp (hurts) to '
        f'{pct(scale, 0, True)} pp (helps)">'
        f'<defs><linearGradient id="lg-{int(scale * 1000)}">{stops}</linearGradient></defs>'
        f'<rect x="0" y="2" width="{width}" height="12" rx="3" fill="url(#lg-{int(scale * 1000)})"/>'
        + _t(0, 30, pct(-scale, 0, True) + " pp (hurts)", cls="tick")
        + _t(width, 30, pct(scale, 0, True) + " pp (helps)", cls="tick", anchor="end")
        + _t(width / 2, 30, "0", cls="tick", anchor="middle")
        + "</svg>"
    )


@dataclass(frozen=True)
class Bar:
    """One bar with an interval and an optional reference marker (planted truth)."""

    label: str
    value: float
    low: float
    high: float
    reference: float | None = None
    tooltip: str = ""


def interval_bars(bars: Sequence[Bar], *, title: str, span: float | None = None) -> str:
    """Horizontal bars from zero with interval whiskers; optional diamond markers (truth).

    The label margin widens with the longest label (about 7 px a character, ``tick_names``).
    """
    bh, width, top = 30, 300, 30
    labels = tick_names(b.label for b in bars)
    left = max(86, CHAR_PX * _widest(labels.values()) + 16)
    finite_vals = [abs(v) for b in bars for v in (b.value, b.low, b.high, b.reference or 0.0) if finite(v)]
    m = span or max([0.02, *finite_vals]) * 1.1
    h = top + bh * len(bars) + 26
    x0 = left + width / 2

    def sx(v: float) -> float:
        return x0 + (width / 2) * max(-1.0, min(1.0, v / m))

    out = [
        _open("bars", left + width + 20, h, title),
        _t(left, 16, title, cls="chart-title"),
    ]
    out.append(f'<line x1="{x0}" x2="{x0}" y1="{top - 6}" y2="{h - 22}" class="zero"/>')
    for i, b in enumerate(bars):
        y = top + bh * i
        out.append(f"<g><title>{escape(b.tooltip or b.label)}</title>")
        out.append(_t(left - 8, y + bh / 2 + 4, labels[b.label], cls="tick", anchor="end"))
        if finite(b.value):
            x1, x2 = sorted((x0, sx(b.value)))
            color = diverging(b.value, m * 0.8)
            out.append(
                f'<rect x="{x1:.1f}" y="{y + 6}" width="{max(x2 - x1, 1):.1f}" height="{bh - 12}" rx="3" '
                f'fill="{color}" class="bar"/>'
            )
        else:
            out.append(_t(x0 + 6, y + bh / 2 + 4, "not estimable", cls="tick small na"))
        if finite(b.low) and finite(b.high):
            out.append(
                f'<line x1="{sx(b.low):.1f}" x2="{sx(b.high):.1f}" y1="{y + bh / 2}" y2="{y + bh / 2}" '
                f'class="whisker"/>'
            )
            for v in (b.low, b.high):
                out.append(
                    f'<line x1="{sx(v):.1f}" x2="{sx(v):.1f}" y1="{y + bh / 2 - 5}" y2="{y + bh / 2 + 5}" '
                    f'class="whisker"/>'
                )
        if b.reference is not None and finite(b.reference):
            rx, ry = sx(b.reference), y + bh / 2
            out.append(f'<path d="M{rx:.1f},{ry - 6} l6,6 l-6,6 l-6,-6 z" class="truth"/>')
        out.append("</g>")
    out.append(_t(sx(-m), h - 6, pct(-m, 0, True), cls="tick", anchor="start"))
    out.append(_t(sx(m), h - 6, pct(m, 0, True) + " pp", cls="tick", anchor="end"))
    out.append("</svg>")
    return "".join(out)


@dataclass(frozen=True)
class Series:
    """Observed adherence by depth bucket with intervals, and a fitted curve."""

    name: str
    color: str
    observed: Sequence[float]
    low: Sequence[float]
    high: Sequence[float]
    fitted: Sequence[float]
    n: Sequence[int]
    stationary: float = float("nan")
    label: str = ""
    """The title shown (``tick_names`` of the models drawn beside it); ``tick_name(name)`` if empty."""


def depth_curves(buckets: Sequence[str], series: Series, *, y_min: float = 0.4) -> str:
    """One small multiple: points with Wilson bars, the Markov-implied curve, stationary line."""
    w, h, left, top, right, bottom = 250, 170, 40, 22, 10, 30
    longest = max((len(b) for b in buckets), default=0)
    # about 5.5 px a character at the small tick font: labels wider than their slot are turned
    # 45° (12 buckets such as "13-16", "17-24" otherwise print over each other)
    turned = 5.5 * longest + 4 > (w - left - right) / max(len(buckets), 1)
    if turned:
        extra = round(4 * longest)
        h, bottom = h + extra, bottom + extra
    pw, ph = w - left - right, h - top - bottom

    def sx(i: int) -> float:
        return left + pw * (i + 0.5) / max(len(buckets), 1)

    def sy(v: float) -> float:
        return top + ph * (1 - (max(y_min, min(1.0, v)) - y_min) / (1 - y_min))

    out = [
        _open("curve", w, h, f"Adherence by conversation depth of {series.name}"),
        _t(
            left,
            14,
            series.label or tick_name(series.name),
            cls="chart-title",
            extra=f' fill="{series.color}"',
        ),
    ]
    for v in (y_min, (y_min + 1) / 2, 1.0):
        out.append(f'<line x1="{left}" x2="{w - right}" y1="{sy(v):.1f}" y2="{sy(v):.1f}" class="gridline"/>')
        out.append(_t(left - 4, sy(v) + 3, pct(v), cls="tick small", anchor="end"))
    for i, b in enumerate(buckets):
        if turned:
            x, y = sx(i) + 3, h - bottom + 10
            out.append(
                _t(x, y, b, cls="tick small", anchor="end", extra=f' transform="rotate(-45 {x:.1f} {y:.1f})"')
            )
        else:
            out.append(_t(sx(i), h - bottom + 14, b, cls="tick small", anchor="middle"))
    out.append(_t(left + pw / 2, h - 3, "depth bucket", cls="tick small", anchor="middle"))
    if finite(series.stationary):
        out.append(
            f'<line x1="{left}" x2="{w - right}" y1="{sy(series.stationary):.1f}" '
            f'y2="{sy(series.stationary):.1f}" class="stationary"><title>stationary '
            f"{pct(series.stationary, 1)}</title></line>"
        )
    pts = [(sx(i), sy(v)) for i, v in enumerate(series.fitted) if finite(v)]
    if len(pts) > 1:
        d = " ".join(f"{'M' if k == 0 else 'L'}{x:.1f},{y:.1f}" for k, (x, y) in enumerate(pts))
        out.append(f'<path d="{d}" class="fit" stroke="{series.color}"/>')
    for i, (v, lo, hi, n) in enumerate(zip(series.observed, series.low, series.high, series.n, strict=True)):
        if not finite(v) or n == 0:
            continue
        x = sx(i)
        sparse = ' opacity="0.35"' if n < SPARSE_N else ""
        out.append(f"<g{sparse}>")
        if finite(lo) and finite(hi):
            out.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{sy(lo):.1f}" y2="{sy(hi):.1f}" class="ci" '
                f'stroke="{series.color}"/>'
            )
        out.append(
            f'<circle cx="{x:.1f}" cy="{sy(v):.1f}" r="3.6" fill="{series.color}" class="obs">'
            f"<title>{escape(series.name)} depth {escape(buckets[i])}: {pct(v, 1)} "
            f"[{pct(lo, 1)}, {pct(hi, 1)}], n={n}</title></circle>"
        )
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def bubbles(rows: Sequence[str], cols: Sequence[str], counts: dict[tuple[str, str], int]) -> str:
    """Handoff frequency by ordered pair: circle area ∝ checked turns in the cell."""
    # like the heatmap: the row-label margin widens with the longest name (~7 px a char), column
    # labels too long for a column are turned
    cw, rh = 58, 58
    labels, top, left, ticks, overhang = _pair_axes(rows, cols, cw, 40)
    w, h = left + cw * len(cols) + 10 + round(overhang), top + rh * len(rows) + 10
    peak = max([1, *counts.values()])
    out = [_open("bubbles", w, h, "Handoffs by pair: rows prefix model A, columns suffix model B, area ∝ n")]
    out.extend(ticks)
    for i, row in enumerate(rows):
        cy = top + rh * i + rh / 2
        out.append(_tick(left - 8, cy + 4, row, labels[row], anchor="end"))
        for j, col in enumerate(cols):
            cx = left + cw * j + cw / 2
            n = counts.get((row, col), 0)
            if row == col:
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2" class="diag-dot"/>')
                continue
            r = 3 + 22 * math.sqrt(max(n, 0) / peak)  # a damaged document may hold n < 0
            out.append(
                f'<g><circle cx="{cx}" cy="{cy}" r="{r:.1f}" class="bubble"/>'
                f"<title>{escape(row)} → {escape(col)}: n = {n}</title>"
                + (_t(cx, cy + 4, str(n), cls="bubble-label", anchor="middle") if r > 12 else "")
                + "</g>"
            )
    out.append("</svg>")
    return "".join(out)


HATCH_DEFS = (
    '<svg width="0" height="0" style="position:absolute"><defs><pattern id="hatch" width="6" height="6" '
    'patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#f1f3f5"/>'
    '<line x1="0" y1="0" x2="0" y2="6" stroke="#ced4da" stroke-width="2"/></pattern></defs></svg>'
)
"""Shared SVG pattern for cells never observed (their fitted risk is shown instead)."""


def scatter(points: Sequence[tuple[float, float, str, bool]], *, x_label: str, y_label: str) -> str:
    """Estimated vs reference values with the identity line; points are (x, y, tooltip, highlighted)."""
    w, h, left, top, pad = 330, 300, 48, 14, 34
    vals = [abs(v) for x, y, _, _ in points for v in (x, y) if finite(v)]
    m = max([0.05, *vals]) * 1.1
    pw, ph = w - left - 10, h - top - pad

    def sx(v: float) -> float:
        return left + pw * (v + m) / (2 * m)

    def sy(v: float) -> float:
        return top + ph * (1 - (v + m) / (2 * m))

    out = [
        _open("scatter", w, h, f"{y_label} against {x_label}"),
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="plot-bg"/>',
        f'<line x1="{sx(-m):.1f}" y1="{sy(-m):.1f}" x2="{sx(m):.1f}" y2="{sy(m):.1f}" class="identity"/>',
        f'<line x1="{sx(0):.1f}" x2="{sx(0):.1f}" y1="{top}" y2="{top + ph}" class="zero"/>',
        f'<line y1="{sy(0):.1f}" y2="{sy(0):.1f}" x1="{left}" x2="{left + pw}" class="zero"/>',
    ]
    for v in (-m * 0.8, 0.0, m * 0.8):
        out.append(_t(sx(v), h - pad + 14, pct(v, 0, True), cls="tick small", anchor="middle"))
        out.append(_t(left - 4, sy(v) + 3, pct(v, 0, True), cls="tick small", anchor="end"))
    out.append(_t(left + pw / 2, h - 4, x_label, cls="axis-title", anchor="middle"))
    out.append(
        _t(
            10,
            top + ph / 2,
            y_label,
            cls="axis-title",
            anchor="middle",
            extra=f' transform="rotate(-90 10 {top + ph / 2:.0f})"',
        )
    )
    for x, y, tip, hot in points:
        if finite(x) and finite(y):
            out.append(
                f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{5 if hot else 4}" '
                f'class="{"pt hot" if hot else "pt"}"><title>{escape(tip)}</title></circle>'
            )
    out.append("</svg>")
    return "".join(out)
