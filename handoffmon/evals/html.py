"""The eval report: adherence at each checkpoint depth, production overlaid by depth bucket, flags marked."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass
from html import escape
from typing import Any

from handoffmon.evals.results import CurvePoint, EvalResult

EVAL_COLOR = "#2563b4"
PROD_COLOR = "#d9480f"
FLAG_COLOR = "#c92a2a"


@dataclass(frozen=True)
class Band:
    """Production adherence over one depth bucket: depths lo…hi, value with a Wilson interval."""

    label: str
    lo: int
    hi: int
    n: int
    adherence: float
    ci_low: float
    ci_high: float
    flagged: bool


@dataclass(frozen=True)
class Panel:
    """One chart: a rule as answered by one author."""

    rule: str
    author: str
    requested: tuple[str, ...]
    points: tuple[CurvePoint, ...]
    bands: tuple[Band, ...]
    matched: dict[int, float]
    flagged: frozenset[int]


def _line(x1: float, x2: float, y1: float, y2: float, cls: str) -> str:
    return f'<line x1="{x1:.1f}" x2="{x2:.1f}" y1="{y1:.1f}" y2="{y2:.1f}" class="{cls}"/>'


def _circle(cx: float, cy: float, r: float, cls: str) -> str:
    return f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{r}" class="{cls}"/>'


def _text(x: float, y: float, s: str, cls: str, anchor: str = "start") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" class="{cls}">{escape(s)}</text>'


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _pct(x: Any) -> str:
    return f"{100 * x:.1f}%" if _finite(x) else "–"


def _num(x: Any) -> str:
    return f"{x:.4f}" if _finite(x) else "–"


def _bands(
    shapes: Any, rule: str, author: str, flagged_buckets: set[str], max_depth: int
) -> tuple[Band, ...]:
    """Production buckets of (rule, author) that start at or before ``max_depth``."""
    from handoffmon.depth import DepthBuckets
    from handoffmon.evals.depth_match import bucket_depths

    shape = shapes.shape(rule, author) if shapes is not None else None
    if shape is None:
        return ()
    buckets = DepthBuckets.from_labels(shapes.buckets)
    out = []
    for i, label in enumerate(shapes.buckets):
        depths = bucket_depths(buckets, label)
        if depths[0] > max_depth or shape.n[i] == 0 or shape.adherence[i] is None:
            continue
        lo, hi = shape.ci_low[i], shape.ci_high[i]
        out.append(
            Band(
                label,
                depths[0],
                depths[-1],
                shape.n[i],
                shape.adherence[i],
                math.nan if lo is None else lo,
                math.nan if hi is None else hi,
                label in flagged_buckets,
            )
        )
    return tuple(out)


def panels(result: EvalResult, shapes: Any = None, comparison: Any = None) -> list[Panel]:
    """One panel per (rule, author) of the pooled curves, with production and compare's flags."""
    pts: dict[tuple[str, str], list[CurvePoint]] = defaultdict(list)
    requested: dict[tuple[str, str], set[str]] = defaultdict(set)
    for c in result.curves:
        if c.script == "*":
            pts[(c.rule, c.author)].append(c)
            requested[(c.rule, c.author)].add(c.model)
    rows = list(comparison.rules) if comparison is not None else []
    out = []
    for (rule, author), points in sorted(pts.items()):
        mine = [r for r in rows if r.rule == rule and r.model == author]
        max_depth = max(p.depth for p in points)
        flagged = {r.depth_bucket for r in mine if r.flagged}
        out.append(
            Panel(
                rule,
                author,
                tuple(sorted(requested[(rule, author)])),
                tuple(sorted(points, key=lambda p: p.depth)),
                _bands(shapes, rule, author, flagged, max_depth),
                {r.depth: r.production_adherence for r in mine if _finite(r.production_adherence)},
                frozenset(r.depth for r in mine if r.flagged),
            )
        )
    return out


@dataclass(frozen=True)
class _Frame:
    """Plot geometry of one overlay chart: linear depth on x, adherence on y."""

    x_max: int
    y_min: float
    w: int = 380
    h: int = 220
    left: int = 42
    top: int = 26
    right: int = 12
    bottom: int = 40

    def sx(self, d: float) -> float:
        pw = self.w - self.left - self.right
        return self.left + pw * (min(d, self.x_max + 0.5) - 0.5) / self.x_max

    def sy(self, v: float) -> float:
        ph = self.h - self.top - self.bottom
        return self.top + ph * (1 - (max(self.y_min, min(1.0, v)) - self.y_min) / (1 - self.y_min))


def _frame(panel: Panel) -> _Frame:
    deepest = max(p.depth for p in panel.points)
    x_max = min(max([deepest, 2, *(b.hi for b in panel.bands)]), 2 * deepest + 2)
    lows = [p.ci_low for p in panel.points] + [b.ci_low for b in panel.bands]
    low = min((v for v in lows if _finite(v)), default=0.5)
    return _Frame(x_max, max(0.0, min(0.6, math.floor((low - 0.05) * 10) / 10)))


def _band_svg(b: Band, author: str, f: _Frame) -> str:
    """A production bucket: its Wilson band and adherence line over the bucket's depths."""
    x1, x2 = f.sx(b.lo - 0.5), f.sx(min(b.hi, f.x_max) + 0.5)
    tip = f"production {author} depth {b.label}: {_pct(b.adherence)} "
    tip += f"[{_pct(b.ci_low)}, {_pct(b.ci_high)}], n={b.n}"
    tip += " — eval too clean here" if b.flagged else ""
    out = [f'<g class="{"band flagged" if b.flagged else "band"}" data-bucket="{escape(b.label)}">']
    out.append(f"<title>{escape(tip)}</title>")
    if _finite(b.ci_low) and _finite(b.ci_high):
        y1, y2 = f.sy(b.ci_high), f.sy(b.ci_low)
        out.append(
            f'<rect x="{x1:.1f}" y="{y1:.1f}" width="{x2 - x1:.1f}" '
            f'height="{max(y2 - y1, 1):.1f}" class="band-ci"/>'
        )
    out.append(_line(x1, x2, f.sy(b.adherence), f.sy(b.adherence), "band-line") + "</g>")
    return "".join(out)


def _checkpoint_svg(p: CurvePoint, panel: Panel, f: _Frame) -> str:
    """An eval checkpoint: point, Wilson bar, production at its depth, and the flag ring."""
    x, flagged = f.sx(p.depth), p.depth in panel.flagged
    tip = f"eval {panel.rule} · {panel.author} at depth {p.depth}: {_pct(p.adherence)} "
    tip += f"[{_pct(p.ci_low)}, {_pct(p.ci_high)}], n={p.n}"
    if p.depth in panel.matched:
        tip += f"; production at this depth {_pct(panel.matched[p.depth])}"
    tip += "; TOO CLEAN" if flagged else ""
    out = [f'<g class="{"checkpoint flagged" if flagged else "checkpoint"}" data-depth="{p.depth}">']
    out.append(f"<title>{escape(tip)}</title>")
    if _finite(p.ci_low) and _finite(p.ci_high):
        out.append(_line(x, x, f.sy(p.ci_low), f.sy(p.ci_high), "eval-ci"))
    if p.depth in panel.matched:
        out.append(_circle(x, f.sy(panel.matched[p.depth]), 4, "prod-at-depth"))
    if _finite(p.adherence):
        out.append(_circle(x, f.sy(p.adherence), 4.2, "eval-pt"))
        if flagged:
            out.append(_circle(x, f.sy(p.adherence), 8, "flag-ring"))
    return "".join(out) + "</g>"


def overlay_chart(panel: Panel) -> str:
    """Inline SVG: x = depth on a linear axis, eval checkpoints with intervals, production bands."""
    f = _frame(panel)
    out = [
        f'<svg class="chart overlay" viewBox="0 0 {f.w} {f.h}" width="{f.w}" height="{f.h}" role="img" '
        f'data-rule="{escape(panel.rule)}" data-model="{escape(panel.author)}" data-x-axis="depth">',
        _chart_title(f.left, panel.rule, panel.author, int((f.w - f.left) / TITLE_CHAR_PX)),
    ]
    for v in (f.y_min, (f.y_min + 1) / 2, 1.0):
        out.append(_line(f.left, f.w - f.right, f.sy(v), f.sy(v), "gridline"))
        out.append(_text(f.left - 4, f.sy(v) + 3, _pct(v), "tick small", "end"))
    out += [_band_svg(b, panel.author, f) for b in panel.bands]
    out += [_checkpoint_svg(p, panel, f) for p in panel.points]
    out += [
        _text(f.sx(d), f.h - f.bottom + 14, str(d), "tick small", "middle") for d in _ticks(panel, f.x_max)
    ]
    pw = f.w - f.left - f.right
    out.append(_text(f.left + pw / 2, f.h - 6, "depth (assistant turn)", "axis-title", "middle"))
    return "".join(out) + "</svg>"


TITLE_CHAR_PX = 7.5
"""About the width of one chart-title character (12.5 px, bold), in px."""


def _middle(name: str, chars: int) -> str:
    """``name`` in at most ``chars`` characters: its start and end kept, an ellipsis between."""
    if len(name) <= chars:
        return name
    head = max(chars // 3, 1)
    return f"{name[:head]}…{name[len(name) - max(chars - head - 1, 1) :]}"


def _chart_title(x: float, rule: str, author: str, chars: int) -> str:
    """``rule · author`` in at most ``chars`` characters (a 128-character author ran past the
    chart's edge), each name shortened in its middle as needed; the whole of it is the tooltip."""
    whole = f"{rule} · {author}"
    text = whole
    if len(whole) > chars:
        room = chars - 3
        short_rule = _middle(rule, max(room // 2, room - len(author)))
        text = f"{short_rule} · {_middle(author, room - len(short_rule))}"
    return (
        f'<text x="{x:.1f}" y="15" text-anchor="start" class="chart-title">{escape(text)}'
        f"<title>{escape(whole)}</title></text>"
    )


def _ticks(panel: Panel, x_max: int) -> list[int]:
    """Depth ticks: 1, every checkpoint and bucket start, thinned so labels never touch."""
    cand = sorted({1, *(p.depth for p in panel.points), *(b.lo for b in panel.bands if b.lo <= x_max)})
    out: list[int] = []
    for d in cand:
        if not out or (d - out[-1]) * 326 / x_max >= 18:
            out.append(d)
    return out


CSS_EXTRA = """
.curves.overlays{grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:10px}
.overlay-card{overflow:visible}svg.overlay{width:100%;height:auto;display:block}
.overlay .band-ci{fill:rgba(217,72,15,.14)}.overlay .band-line{stroke:#d9480f;stroke-width:2}
.overlay .band.flagged .band-ci{fill:rgba(201,42,42,.22);stroke:#c92a2a;stroke-dasharray:3 2}
.overlay .eval-ci{stroke:#2563b4;stroke-width:2;opacity:.55}.overlay .eval-pt{fill:#2563b4}
.overlay .prod-at-depth{fill:#fff;stroke:#d9480f;stroke-width:2}
.overlay .flag-ring{fill:none;stroke:#c92a2a;stroke-width:2}
.legend-line{display:flex;gap:18px;flex-wrap:wrap;font-size:12px;color:#475467;margin:0 0 10px}
.sw{display:inline-block;width:18px;height:10px;margin-right:5px;vertical-align:middle}
.flag-list li{color:#c92a2a}
"""


def _legend(with_production: bool) -> str:
    items = [
        f'<span><span class="sw" style="background:{EVAL_COLOR}"></span>'
        "eval checkpoint, Wilson interval</span>"
    ]
    if with_production:
        items += [
            '<span><span class="sw" style="background:rgba(217,72,15,.25);'
            f'border-top:2px solid {PROD_COLOR}">'
            "</span>production over the depth bucket, Wilson interval</span>",
            f'<span><span class="sw" style="border:2px solid {PROD_COLOR};border-radius:50%;'
            'width:10px"></span>'
            "production moved to the checkpoint's depth</span>",
            f'<span><span class="sw" style="border:2px solid {FLAG_COLOR};border-radius:50%;'
            'width:12px"></span>'
            "too clean (production significantly below)</span>",
        ]
    return f'<div class="legend-line">{"".join(items)}</div>'


def _pressure_table(result: EvalResult) -> str:
    """Table of the pressure-script Markov fits ('' when there are none)."""
    pressure = "".join(
        f"<tr><td>{escape(f['script'])}</td><td>{escape(f['model'])}</td>"
        f"<td>{_pct(f['first_turn_accuracy'])}</td><td>{_pct(f['stationary'])} "
        f"[{_pct(f['stationary_ci'][0])}, {_pct(f['stationary_ci'][1])}]</td>"
        f"<td>{_pct(f['p_tf'])}</td><td>{_pct(f['p_ft'])}</td><td>{_num(f['log_loss'])}</td>"
        f"<td>{_num(f['mse'])}</td><td>{f['n_train']}/{f['n_val']}</td></tr>"
        for f in result.pressure
    )
    return (
        '<div class="card"><h2>Pressure scripts</h2><table class="markov"><thead><tr><th>pressure script</th>'
        "<th>model</th><th>turn-1 acc.</th><th>stationary acc.</th><th>p<sub>TF</sub></th>"
        "<th>p<sub>FT</sub></th><th>log loss</th><th>MSE</th><th>train/val runs</th></tr></thead>"
        f"<tbody>{pressure}</tbody></table></div>"
        if pressure
        else ""
    )


def _flags(comparison: Any) -> str:
    if comparison is None:
        return ""
    items = "".join(
        f"<li>{escape(r.rule)} · {escape(r.model)} at depth {r.depth} ({escape(r.depth_bucket)}): eval "
        f"{_pct(r.eval_adherence)} vs production {_pct(r.production_adherence)}, "
        f"adjusted p {r.p_adjusted:.2g}</li>"
        for r in comparison.flagged
    )
    body = f'<ul class="flag-list">{items}</ul>' if items else "<p>No checkpoint is flagged too clean.</p>"
    return f'<div class="card" id="flags"><h2>Too clean</h2>{body}</div>'


def eval_report(
    result: EvalResult,
    *,
    shapes: Any = None,
    comparison: Any = None,
    title: str = "handoffmon — drift eval",
) -> str:
    """One page: per rule and author, eval adherence at each checkpoint depth (linear depth axis).

    With production ``shapes`` (and ``eval compare``'s ``comparison``) each chart overlays
    production's adherence by depth bucket with its interval, joined on the author, and
    marks the checkpoints flagged too clean.
    """
    from handoffmon.report.assets import CSS, SCRIPT

    charts = "".join(
        f'<div class="card overlay-card">{overlay_chart(p)}</div>' for p in panels(result, shapes, comparison)
    )
    rows = "".join(
        f"<tr><td>{escape(s['id'])}</td><td>{escape(s['kind'])}</td><td>{s['length']}</td>"
        f"<td>{escape(', '.join(map(str, s['checkpoints'])))}</td>"
        f"<td>{escape(', '.join(map(str, s['derails'])))}</td>"
        f"<td>{escape(', '.join(s['rules']))}</td></tr>"
        for s in result.scripts
    )
    authors = " · ".join(f"{escape(m)} → {escape(', '.join(per))}" for m, per in result.authors.items())
    verdicts = " · ".join(f"{escape(k)} {v}" for k, v in sorted(result.verdicts.items()))
    created = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(result.created_at))
    source = f" · production {escape(shapes.source)}" if shapes is not None else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>{CSS}{CSS_EXTRA}</style></head>
<body><header><div class="wrap"><h1>{escape(title)}</h1>
<p class="meta">{escape(created)} · {escape(result.database)}{source}
 · requested → answered by: {authors or "–"}
 · checkpoint verdicts: {verdicts}</p></div></header>
<main class="wrap">
<p class="note">Adherence at each checkpoint depth over runs, pooled over scripts, with
{result.confidence:.0%} Wilson intervals, per rule and per author (the deployment that answered, as
production names it); the x axis is the depth itself. not_applicable and error verdicts are left out.</p>
{_legend(shapes is not None)}
{_flags(comparison)}
<div class="curves overlays">{charts}</div>
<div class="card"><h2>Scripts</h2><table class="markov"><thead><tr><th>script</th><th>kind</th><th>turns</th>
<th>checkpoints</th><th>derails</th><th>rules</th></tr></thead><tbody>{rows}</tbody></table></div>
{_pressure_table(result)}
</main><script>{SCRIPT}</script></body></html>
"""
