"""Eval authors are named as production's labels name them, however long or odd (audit 2026-12-07).

Production keys its counts by the label of the author (``LabelGuard.model``: at most
``MAX_LABEL_CHARS`` characters, unprintable ones escaped), and ``shapes export`` writes those
labels. The eval recorded the canonical name as is, so an author whose canonical name is longer
than 128 characters (a Bedrock ARN, a Vertex endpoint path) or holds a zero-width character
never joined: ``eval compare`` exited 4, "no (rule, author, depth) of the eval has production
data", listing two names that differ only past character 128.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from handoffmon.attribution.names import ModelNames
from handoffmon.evals.models import author_of
from handoffmon.labels import MAX_LABEL_CHARS, LabelGuard

LONG = "bedrock/arn:aws:bedrock:eu-west-1:123456789012:application-inference-profile/" + "x" * 70


def _response(deployment: str, model_name: str) -> SimpleNamespace:
    return SimpleNamespace(
        _hidden_params={"model_id": deployment, "litellm_model_name": model_name},
        model=model_name,
        choices=[],
    )


@pytest.mark.parametrize(
    "canonical",
    [LONG, "Atlas\u200b (EU)", "modèle\tß", "Claude Sonnet (EU) ✓", "gpt-4o"],
    ids=["over-128-chars", "zero-width", "tab", "unicode-and-spaces", "plain"],
)
def test_a_mapped_author_is_named_as_production_labels_it(canonical: str) -> None:
    """The deployment mapped by attribution.canonical_models: the eval's author is the label."""
    names = ModelNames({"dep-eu-1": canonical})
    author = author_of(_response("dep-eu-1", "openai/gpt-4o"), names, "chat")
    assert author == LabelGuard().model(canonical)
    assert len(author) <= MAX_LABEL_CHARS


def test_an_unmapped_long_provider_model_is_named_as_production_labels_it() -> None:
    """No canonical name: the provider model string, cut where production cuts it."""
    author = author_of(_response("dep-9", LONG), ModelNames(), "chat")
    assert author == LabelGuard().model(LONG) == LONG[:MAX_LABEL_CHARS]


def test_compare_model_is_matched_as_production_labels_it(tmp_path: Path) -> None:
    """``eval compare --model`` with the name as configured (a zero-width character, or all 147
    characters of an ARN) finds the author both sides wrote as its label."""
    from click.testing import CliRunner

    from handoffmon.cli import main
    from tests.evals.test_eval_scope import _eval_doc, _shapes

    for name in ("Atlas\u200b (EU)", LONG):
        label = LabelGuard().model(name)
        shapes = _shapes(tmp_path / "shapes.json", [label])
        ev = _eval_doc(tmp_path / "eval.json", {label: ["no_commas"]})
        res = CliRunner().invoke(main, ["eval", "compare", "--shapes", shapes, ev, "--model", name])
        assert res.exit_code in (0, 3), res.output
        assert "compared 1 (rule, model, depth)" in res.output, res.output
