"""Pins canonical model naming: mapping, pass-through, unknown."""

from __future__ import annotations

from handoffmon.attribution import ModelNames


def test_mapped_names_become_canonical() -> None:
    """A deployment id or provider model string maps to its canonical name."""
    names = ModelNames({"azure-gpt4o-eu": "gpt-4o", "claude-3-5-sonnet-20241022": "claude-sonnet"})
    assert names.canonical("azure-gpt4o-eu") == "gpt-4o"
    assert names.canonical("claude-3-5-sonnet-20241022") == "claude-sonnet"


def test_case_and_provider_prefix_are_tolerated() -> None:
    """Lookups fall back to lower case and to the part after the provider prefix."""
    names = ModelNames({"gpt-4o-2024-08-06": "gpt-4o"})
    assert names.canonical("GPT-4o-2024-08-06") == "gpt-4o"
    assert names.canonical("openai/gpt-4o-2024-08-06") == "gpt-4o"


def test_unmapped_names_pass_through_unchanged() -> None:
    """Unseen names are not rewritten (exporters bound cardinality later)."""
    names = ModelNames({"a": "b"})
    assert names.canonical("mistral/mistral-large") == "mistral/mistral-large"


def test_missing_name_is_unknown() -> None:
    """None or empty names become `unknown`."""
    names = ModelNames()
    assert names.canonical(None) == "unknown"
    assert names.canonical("") == "unknown"


def test_canonical_all_keeps_order_and_merges_repeats() -> None:
    """Several raw authors keep their order; consecutive duplicates after mapping merge."""
    names = ModelNames({"dep-1": "gpt-4o", "dep-2": "gpt-4o"})
    assert names.canonical_all(["dep-1", "dep-2", "claude"]) == ("gpt-4o", "claude")


def test_memoized_answers_stay_correct_and_bounded() -> None:
    """Repeated lookups give the first answer; the memo is cleared, not grown, past its bound."""
    names = ModelNames({"gpt-4o-2024-08-06": "gpt-4o"})
    for _ in range(3):
        assert names.canonical("openai/GPT-4o-2024-08-06") == "gpt-4o"
        assert names.canonical("other/model") == "other/model"
        assert names.canonical_all(["openai/gpt-4o-2024-08-06", "gpt-4o-2024-08-06", None]) == (
            "gpt-4o",
            "unknown",
        )
    for i in range(ModelNames.MEMO_MAX + 10):
        assert names.canonical(f"m{i}") == f"m{i}"
    assert len(names._memo) <= ModelNames.MEMO_MAX
    assert names.canonical("gpt-4o-2024-08-06") == "gpt-4o"
