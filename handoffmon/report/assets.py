"""Inline CSS and JS of the HTML report (kept here so the page needs nothing from the network)."""

from __future__ import annotations

CSS = """
:root{--ink:#1f2328;--muted:#667085;--line:#e4e7ec;--bg:#f6f7f9;--card:#fff;--accent:#2563b4}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,"Helvetica Neue",Arial,
 sans-serif;color:var(--ink);background:var(--bg)}
.wrap{max-width:1280px;margin:0 auto;padding:0 24px}
header{background:linear-gradient(120deg,#14213d,#1d3f72);color:#fff;padding:22px 0 18px;margin-bottom:18px}
header h1{margin:0 0 4px;font-size:24px;font-weight:650;letter-spacing:.2px}
header .meta{margin:0;color:#c9d4ea;font-size:13px}
.note{color:var(--muted);font-size:12.5px;margin:0 0 14px;max-width:980px}
.tabs{display:flex;gap:6px;flex-wrap:wrap;margin-bottom:14px}
.tab{border:1px solid var(--line);background:#fff;color:var(--ink);padding:6px 14px;border-radius:999px;
 font:inherit;cursor:pointer}
.tab.active{background:var(--accent);border-color:var(--accent);color:#fff}
.hidden{display:none}
.note.warn{color:#9a3412;margin-top:10px}
.banner{background:#eef4ff;border:1px solid #b6ccf0;border-radius:10px;padding:10px 14px;margin:0 0 12px;
 font-size:13.5px}
.banner.warn{background:#fff4e5;border-color:#f0b46a;color:#7a3a00}
.kpis{display:flex;gap:12px;flex-wrap:wrap;margin:0 0 14px}
.kpi{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:10px 16px;min-width:170px;
 box-shadow:0 1px 2px rgba(16,24,40,.04)}
.kpi-v{font-size:20px;font-weight:650;overflow-wrap:anywhere}
.kpi-k{color:var(--muted);font-size:12px}
header .kpis{margin:14px 0 0}
header .kpi{background:rgba(255,255,255,.08);border-color:rgba(255,255,255,.15);min-width:120px;
 padding:8px 14px}
header .kpi-v{font-size:17px;color:#fff}
header .kpi-k{color:#c9d4ea}
.grid.two{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:14px}
@media (max-width:1100px){.grid.two{grid-template-columns:1fr}}
.card{background:var(--card);border:1px solid var(--line);border-radius:14px;padding:16px 18px;
 margin-bottom:14px;box-shadow:0 1px 3px rgba(16,24,40,.05);overflow-x:auto}
.card h2{margin:0 0 2px;font-size:16px;font-weight:650}
.sub{margin:0 0 10px;color:var(--muted);font-size:12.5px}
.hint{color:var(--muted);font-size:12px}
.legend-row{display:flex;align-items:center;gap:16px;flex-wrap:wrap;margin-top:6px}
.pair-charts{display:flex;flex-wrap:wrap;gap:4px}
.curves{display:grid;grid-template-columns:repeat(auto-fill,minmax(250px,1fr));gap:6px}
svg text{font-family:inherit}
.tick{font-size:11.5px;fill:#475467}.tick.small{font-size:10px}
.axis-title{font-size:11px;fill:var(--muted)}
.chart-title{font-size:12.5px;font-weight:600;fill:var(--ink)}
.cell rect{stroke:#fff;stroke-width:1}.cell.sig rect{stroke:#1f2328;stroke-width:1.6}
.cell-label{font-size:12.5px;font-weight:600}
.diag{fill:#f1f3f5}.diag-label{font-size:10px;fill:#98a2b3}.empty{fill:#fafafa}
.zero{stroke:#98a2b3;stroke-dasharray:3 3}
.whisker{stroke:#1f2328;stroke-width:1.4}
.truth{fill:#f59f00;stroke:#7a4a00;stroke-width:1}
.gridline{stroke:#eef0f3}
.fit{fill:none;stroke-width:2;opacity:.85}
.ci{stroke-width:2;opacity:.45}
.stationary{stroke:#98a2b3;stroke-dasharray:4 4}
.bubble{fill:rgba(37,99,180,.22);stroke:#2563b4}
.bubble-label{font-size:10.5px;fill:#14213d;font-weight:600}
.diag-dot{fill:#ced4da}
.plot-bg{fill:#fbfcfd;stroke:#eef0f3}.identity{stroke:#f59f00;stroke-width:1.5;stroke-dasharray:5 4}
.pt{fill:rgba(37,99,180,.55);stroke:#1d3f72}.pt.hot{fill:rgba(192,57,43,.7);stroke:#7a1d12}
table.markov{border-collapse:collapse;width:100%;font-size:13px}
.markov th,.markov td{padding:6px 8px;border-bottom:1px solid var(--line);text-align:right}
.markov th:first-child,.markov td:first-child{text-align:left;overflow-wrap:anywhere}
.markov th{color:var(--muted);font-weight:600}
.markov .ci{color:var(--muted);font-size:11.5px}
.markov td.ok{color:#2b8a3e;font-weight:600}.markov td.miss{color:#b42318;font-weight:600}
footer{color:var(--muted);font-size:12px;padding:10px 24px 30px}
"""

SCRIPT = """
(function(){
  var tabs=document.querySelectorAll('.tab');
  tabs.forEach(function(t){t.addEventListener('click',function(){
    tabs.forEach(function(o){o.classList.toggle('active',o===t);
      o.setAttribute('aria-selected',o===t?'true':'false');});
    document.querySelectorAll('section.rule').forEach(function(s){
      s.classList.toggle('hidden',s.id!==t.dataset.target);});
  });});
  var ready=document.createElement('div');
  ready.id='report-ready';ready.hidden=true;ready.textContent='ready';
  document.body.appendChild(ready);
})();
"""
