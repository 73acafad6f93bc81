"""Headless Chromium layout checks of a report page: overlapping labels, empty cards, chart geometry."""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path
from typing import Any

PROBE = """
<script>
(function(){
  // a label's box as drawn: its own bounding box through its transform (a rotated column label
  // is a rotated rectangle; its axis-aligned bounding rect would overlap its neighbours' always)
  function box(e){var r=e.getBoundingClientRect(),b=e.getBBox(),m=e.getScreenCTM();
    var q=[[b.x,b.y],[b.x+b.width,b.y],[b.x+b.width,b.y+b.height],[b.x,b.y+b.height]].map(function(p){
      return [m.a*p[0]+m.c*p[1]+m.e,m.b*p[0]+m.d*p[1]+m.f];});
    return {q:q,x:r.left,y:r.top,w:r.width,h:r.height,t:e.textContent};}
  // separating-axis test of two convex quads, with the 0.5 px slack the axis-aligned test had
  function apart(a,b){for(var i=0;i<4;i++){var p=a[i],n=a[(i+1)%4],ax=[p[1]-n[1],n[0]-p[0]];
      var len=Math.hypot(ax[0],ax[1])||1;
      var pa=a.map(function(v){return (v[0]*ax[0]+v[1]*ax[1])/len;});
      var pb=b.map(function(v){return (v[0]*ax[0]+v[1]*ax[1])/len;});
      if(Math.max.apply(null,pa)<=Math.min.apply(null,pb)+0.5||Math.max.apply(null,pb)<=Math.min.apply(null,pa)+0.5)
        return true;}
    return false;}
  function overlaps(a,b){return !apart(a.q,b.q)&&!apart(b.q,a.q);}
  var out={svgs:[],emptyCards:[],cards:[]};
  document.querySelectorAll('.card').forEach(function(c){
    var h=c.querySelector('h2');var title=h?h.textContent:'';
    out.cards.push(title);
    var data=c.querySelectorAll('td,li,p:not(.sub),svg circle,svg rect,svg line,svg path').length;
    if(data===0){out.emptyCards.push(title||c.className);}
  });
  document.querySelectorAll('svg.chart').forEach(function(s){
    var sb=s.getBoundingClientRect();
    var ticks=[].slice.call(s.querySelectorAll('text')).map(box).filter(function(b){return b.w>0;});
    var clash=[];
    for(var i=0;i<ticks.length;i++)for(var j=i+1;j<ticks.length;j++)
      if(overlaps(ticks[i],ticks[j]))clash.push([ticks[i].t,ticks[j].t]);
    var outside=ticks.filter(function(b){return b.x<sb.left-0.5||b.x+b.w>sb.right+0.5;})
      .map(function(b){return b.t;});
    var pts=[].slice.call(s.querySelectorAll('g.checkpoint')).map(function(g){
      var c=g.querySelector('circle.eval-pt');var r=c?c.getBoundingClientRect():null;
      return {depth:+g.dataset.depth,x:r?r.left+r.width/2:null,flagged:g.classList.contains('flagged')};});
    out.svgs.push({cls:s.getAttribute('class'),rule:s.dataset.rule||null,model:s.dataset.model||null,
      xAxis:s.dataset.xAxis||null,clash:clash,outside:outside,points:pts,
      bands:s.querySelectorAll('g.band').length,flaggedBands:s.querySelectorAll('g.band.flagged').length});
  });
  var pre=document.createElement('pre');pre.id='layout-probe';pre.textContent=JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def chromium(
    binary: str, profile: Path, *args: str, window: str = "1400,2000"
) -> subprocess.CompletedProcess[str]:
    """Headless Debian Chromium with the flags this machine's closed network needs; the page's
    console goes to stderr (``console_errors``). The one launcher of the report and eval tests."""
    cmd = [
        binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}", f"--window-size={window}", *args,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)


def console_errors(run: subprocess.CompletedProcess[str]) -> list[str]:
    """The console messages and uncaught errors a ``chromium`` run logged."""
    return [ln for ln in run.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]


def probe(binary: str, page: Path, workdir: Path) -> dict[str, Any]:
    """Render ``page`` (a copy with the probe script appended) and return what the probe measured."""
    probed = workdir / f"probed-{page.name}"
    probed.write_text(
        page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8"
    )
    dom = chromium(binary, workdir / f"profile-{page.stem}", "--dump-dom", probed.as_uri())
    found = re.search(r'<pre id="layout-probe">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))  # type: ignore[no-any-return]


def screenshot(binary: str, page: Path, shot: Path) -> bytes:
    """A PNG of the page (and the bytes, to check it is a rendered page)."""
    chromium(binary, shot.parent / f"profile-shot-{page.stem}", f"--screenshot={shot}", page.as_uri())
    return shot.read_bytes()
