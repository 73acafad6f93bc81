"""Reply writer: real text that passes or fails each configured rule as the simulator intends."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from handoffmon.sim import phrases
from handoffmon.sim.fleet import SimRule

_WORD = re.compile(r"\w+")
DEFAULT_WORDS = (25, 45)
"""Target word range when no length rule is configured."""
PASS_SHARE = (0.45, 0.8)
"""A compliant reply uses this share of ``max_words`` (margin for any word tokenizer)."""
FAIL_SHARE = (1.3, 1.8)
"""A non-compliant reply overshoots ``max_words`` by this factor."""


def word_bounds(text: str) -> tuple[int, int]:
    """(fewest, most) words any reasonable counter finds: whitespace split vs ``\\w+`` tokens."""
    a, b = len(text.split()), len(_WORD.findall(text))
    return min(a, b), max(a, b)


@dataclass(frozen=True)
class ReplyWriter:
    """Composes a reply that complies with exactly the rules marked True.

    Args:
        rules: the rules of the simulated system prompt.
    """

    rules: tuple[SimRule, ...]

    def _rule(self, kind: str) -> SimRule | None:
        return next((r for r in self.rules if r.kind == kind), None)

    def _language(self, intent: Mapping[str, bool]) -> str:
        rule = self._rule("language")
        if rule is None:
            return "en"
        target = str(rule.params.get("language", "es"))
        if intent.get(rule.name, True):
            return target
        return "en" if target == "es" else "es"

    def _word_range(self, intent: Mapping[str, bool]) -> tuple[int, int]:
        rule = self._rule("max_words")
        if rule is None:
            return DEFAULT_WORDS
        limit = int(rule.params.get("max_words", 60))  # type: ignore[call-overload]
        share = PASS_SHARE if intent.get(rule.name, True) else FAIL_SHARE
        return int(limit * share[0]), int(limit * share[1])

    def _answer(self, intent: Mapping[str, bool], drawn: int, previous: str | None) -> str:
        """The answer value: kept from the previous turn, or a different one, per the stability rule."""
        rule = self._rule("answer_stability")
        if rule is None or previous is None:
            return str(drawn)
        if intent.get(rule.name, True):
            return previous
        return str(drawn) if str(drawn) != previous else str(drawn + 1)

    def _fixed(
        self, intent: Mapping[str, bool], lang: str, rng: np.random.Generator, previous: str | None
    ) -> tuple[list[str], str | None]:
        """Sentences that carry the keyword and the answer, and the answer a tag extractor sees."""
        out: list[str] = []
        kw = self._rule("keyword")
        if kw is not None and intent.get(kw.name, True):
            template = phrases.KEYWORD_SENTENCES[lang][int(rng.integers(2))]
            out.append(template.format(kw=kw.params.get("keyword", "ticket")))
        tag = self._rule("answer_tag")
        answer = self._answer(intent, int(rng.integers(1000, 99999)), previous)
        template = phrases.ANSWER_SENTENCES[lang][int(rng.integers(2))]
        if tag is None:
            out.append(template.format(answer=answer))
            return out, previous
        if intent.get(tag.name, True):
            out.append(template.format(answer=f"<answer>{answer}</answer>"))
        elif rng.random() < 0.5:
            out.append(template.format(answer=answer))  # tag missing: nothing to extract
            return out, previous
        else:  # tag given twice
            out.append(template.format(answer=f"<answer>{answer}</answer> <answer>{answer}</answer>"))
        return out, answer

    def write(self, intent: Mapping[str, bool], rng: np.random.Generator) -> str:
        """Reply text for one turn (see ``compose``)."""
        return self.compose(intent, rng)[0]

    def compose(
        self, intent: Mapping[str, bool], rng: np.random.Generator, previous_answer: str | None = None
    ) -> tuple[str, str | None]:
        """Reply text for one turn, and the latest answer a tag extractor would have seen.

        Args:
            intent: rule name → whether the reply should comply (missing = comply).
            rng: randomness for sentence choice (seeded by the caller).
            previous_answer: the conversation's latest tagged answer (for answer stability).
        """
        lang = self._language(intent)
        lo, hi = self._word_range(intent)
        fixed, answer = self._fixed(intent, lang, rng, previous_answer)
        commas = self._rule("no_commas")
        add_commas = commas is not None and not intent.get(commas.name, True)
        reserve = 8 if add_commas else 0
        bank = phrases.SPANISH if lang == "es" else phrases.ENGLISH
        order = rng.permutation(len(bank))
        target = int(rng.integers(lo, hi + 1))
        body: list[str] = []
        words = sum(word_bounds(s)[1] for s in fixed) + reserve
        for i in order:
            if words >= target:
                break
            sentence = bank[int(i)]
            n = word_bounds(sentence)[1]
            if words + n > hi:
                continue
            body.append(sentence)
            words += n
        if add_commas:
            body = self._with_commas(body or [bank[int(order[0])]], lang, rng)
        sentences = [body[0], *fixed[:-1], *body[1:], fixed[-1]] if body else fixed
        return self._envelope(" ".join(sentences), intent, rng), answer

    def _envelope(self, text: str, intent: Mapping[str, bool], rng: np.random.Generator) -> str:
        """With a ``json`` rule: ``{"reply": text}``, or a broken/prose/wrong-key variant to fail it."""
        rule = self._rule("json")
        if rule is None:
            return text
        if intent.get(rule.name, True):
            return json.dumps({"reply": text}, ensure_ascii=False)
        variant = int(rng.integers(3))
        if variant == 0:
            return '{"reply": "' + text + '"'  # unterminated object
        if variant == 1:
            return text  # plain prose
        return json.dumps({"message": text}, ensure_ascii=False)  # valid JSON, wrong shape

    @staticmethod
    def _with_commas(body: list[str], lang: str, rng: np.random.Generator) -> list[str]:
        """Give one sentence a connector with a comma (two in longer replies)."""
        out = list(body)
        picks = rng.choice(len(out), size=min(len(out), 1 + len(out) // 4), replace=False)
        for i in picks:
            connector = phrases.CONNECTORS[lang][int(rng.integers(len(phrases.CONNECTORS[lang])))]
            s = out[int(i)]
            # keep "I" capitalised; lower the first letter of any other sentence start
            out[int(i)] = connector + (s if s[1:2] == " " else s[0].lower() + s[1:])
        return out
