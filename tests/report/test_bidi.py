"""Right-to-left model names are laid out on their own and cannot flip the text around them."""

from __future__ import annotations

import dataclasses

from handoffmon.depth import DepthBuckets
from handoffmon.refit import refit
from handoffmon.refit.result import ALL_RULES
from handoffmon.report import render_report
from handoffmon.report.bidi import FSI, PDI, isolate
from handoffmon.sim.fleet import make_fleet
from handoffmon.sim.offline import simulate_counts
from handoffmon.sim.truth import Truth

EVIL = "\u202eevil"  # right-to-left override with no terminator: "evil → good" would show "doog ← live"


def test_a_name_with_a_bidi_override_is_isolated_everywhere_and_plain_names_are_untouched() -> None:
    fleet = make_fleet(3, seed=3)
    fleet = dataclasses.replace(
        fleet, models=(dataclasses.replace(fleet.models[0], name=EVIL), *fleet.models[1:])
    )
    result = refit(simulate_counts(fleet, 300, seed=1), buckets=DepthBuckets(), now=0.0)
    assert EVIL in result.rules[ALL_RULES].models
    html = render_report(result, truth=Truth.of(fleet).to_dict())
    bare = html.replace(f"{FSI}{EVIL}{PDI}", "")
    assert html.count(f"{FSI}{EVIL}{PDI}") > 20 and "\u202e" not in bare  # every occurrence isolated
    other = fleet.models[1].name
    assert isolate(other) == other and f"{FSI}{other}" not in html
    assert html.count('class="truth"') == 2 * 3 * len(result.rules)  # planted markers found by name
    assert isolate("ערוץ") == f"{FSI}ערוץ{PDI}"  # right-to-left letters alone are isolated too


def test_isolation_walks_the_records_instead_of_a_json_round_trip(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """One Arabic model name in a K = 100 refit made the report 3.1 s instead of 0.5 s: the names
    were isolated by a to_dict/from_dict round trip of the whole refit (3.3 s). The records are
    walked now (0.8 s), with the same result as the round trip and without one."""
    from handoffmon.refit.result import RefitResult
    from handoffmon.report.bidi import isolated

    fleet = make_fleet(12, n_rules=2, seed=3)
    arabic = "نموذج-7"
    models = list(fleet.models)
    models[7] = dataclasses.replace(models[7], name=arabic)
    fleet = dataclasses.replace(fleet, models=tuple(models))
    result = refit(simulate_counts(fleet, 400, seed=1), buckets=DepthBuckets(), now=0.0)
    expected = result.to_json().replace(f'"{arabic}"', f'"{FSI}{arabic}{PDI}"')  # keys and values

    def no_round_trip(*args: object, **kwargs: object) -> None:
        raise AssertionError("isolated() must not rebuild the refit from its document")

    with monkeypatch.context() as m:
        m.setattr(RefitResult, "from_dict", classmethod(no_round_trip))
        renamed, _ = isolated(result, None)
    assert arabic in result.rules[ALL_RULES].models  # the input is left as it was
    assert f"{FSI}{arabic}{PDI}" in renamed.rules[ALL_RULES].models
    assert renamed.to_json() == expected
