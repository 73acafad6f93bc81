"""Strict and loose IFEval verdicts for a prompt, and reading/writing the reference file formats."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from handoffmon.checkers.base import ParamError
from handoffmon.checkers.ifeval.instructions import InstructionCheck, build_instruction
from handoffmon.errors import InputError

Mode = Literal["strict", "loose"]


def loose_variants(response: str) -> tuple[str, ...]:
    """The reference's eight loose-mode variants: raw, ``*`` removed, first/last/both lines dropped."""
    lines = response.split("\n")
    drop_first = "\n".join(lines[1:]).strip()
    drop_last = "\n".join(lines[:-1]).strip()
    drop_both = "\n".join(lines[1:-1]).strip()
    return (
        response,
        response.replace("*", ""),
        drop_first,
        drop_last,
        drop_both,
        drop_first.replace("*", ""),
        drop_last.replace("*", ""),
        drop_both.replace("*", ""),
    )


def follows(check: InstructionCheck, response: str, mode: Mode) -> bool:
    """Reference verdict: a blank response never follows; loose passes if any variant does."""
    candidates = (response,) if mode == "strict" else loose_variants(response)
    return any(r.strip() and check(r) for r in candidates)


@dataclass(frozen=True, slots=True)
class PromptInput:
    """One line of ``input_data.jsonl``."""

    key: int
    prompt: str
    instruction_id_list: tuple[str, ...]
    kwargs: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True)
class PromptResult:
    """One line of the reference's ``eval_results_{strict,loose}.jsonl``."""

    prompt: str
    response: str
    instruction_id_list: tuple[str, ...]
    follow_instruction_list: tuple[bool, ...]

    @property
    def follow_all_instructions(self) -> bool:
        """Every instruction followed."""
        return all(self.follow_instruction_list)

    def to_json(self) -> dict[str, Any]:
        """The reference's field set."""
        return {
            "follow_all_instructions": self.follow_all_instructions,
            "follow_instruction_list": list(self.follow_instruction_list),
            "instruction_id_list": list(self.instruction_id_list),
            "prompt": self.prompt,
            "response": self.response,
        }


def evaluate_prompt(inp: PromptInput, response: str, mode: Mode) -> PromptResult:
    """Verdict per instruction of one prompt (raises ``KeyError``/``ParamError`` for bad kwargs)."""
    verdicts = tuple(
        follows(build_instruction(iid, dict(kw)), response, mode)
        for iid, kw in zip(inp.instruction_id_list, inp.kwargs, strict=True)
    )
    return PromptResult(inp.prompt, response, inp.instruction_id_list, verdicts)


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) per non-blank line; ``InputError`` naming file and line otherwise."""
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from exc
    with fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise InputError(f"{path}:{lineno}: not valid JSON: {exc}") from exc
            if not isinstance(obj, dict):
                raise InputError(f"{path}:{lineno}: expected a JSON object")
            yield lineno, obj


def _field(obj: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = obj.get(name)
    if not isinstance(value, kind):
        raise InputError(f"{where}: field {name!r} missing or not a {getattr(kind, '__name__', kind)}")
    return value


def read_inputs(path: str | Path) -> list[PromptInput]:
    """Parse ``input_data.jsonl`` (key, prompt, instruction_id_list, kwargs), validating each line."""
    out = []
    for lineno, obj in read_jsonl(path):
        where = f"{path}:{lineno}"
        ids = _field(obj, "instruction_id_list", list, where)
        kwargs = obj.get("kwargs") or [{} for _ in ids]
        if (
            not isinstance(kwargs, list)
            or len(kwargs) != len(ids)
            or not all(isinstance(k, dict) for k in kwargs)
        ):
            raise InputError(f"{where}: 'kwargs' must be a list of objects, one per instruction id")
        if not all(isinstance(i, str) for i in ids):
            raise InputError(f"{where}: every instruction id must be a string, got {ids!r}"[:300])
        prompt = _field(obj, "prompt", str, where)
        inp = PromptInput(_key(obj, lineno, where), prompt, tuple(ids), tuple(kwargs))
        _validate(inp, where)
        out.append(inp)
    return out


def _key(obj: Mapping[str, Any], lineno: int, where: str) -> int:
    """The line's ``key`` (an integer; an integral float such as 7.0 reads as 7), or its line number."""
    key = obj.get("key", lineno)
    if isinstance(key, float) and key.is_integer():
        return int(key)
    if isinstance(key, bool) or not isinstance(key, int):
        raise InputError(f"{where}: field 'key' must be an integer, got {json.dumps(key)[:80]}")
    return key


def _validate(inp: PromptInput, where: str) -> None:
    for iid, kw in zip(inp.instruction_id_list, inp.kwargs, strict=True):
        try:
            build_instruction(iid, dict(kw))
        except KeyError:
            raise InputError(f"{where}: unknown instruction id {iid!r}") from None
        except ParamError as exc:
            raise InputError(f"{where}: {iid}: kwargs {exc.key!r}: {exc}") from exc


def read_responses(path: str | Path) -> dict[str, str]:
    """Parse ``responses.jsonl`` (prompt, response) into prompt → response."""
    out: dict[str, str] = {}
    for lineno, obj in read_jsonl(path):
        where = f"{path}:{lineno}"
        out[_field(obj, "prompt", str, where)] = _field(obj, "response", str, where)
    return out


@dataclass(frozen=True, slots=True)
class Accuracy:
    """Prompt-level and instruction-level accuracy of a run."""

    prompts: int
    prompts_followed: int
    instructions: int
    instructions_followed: int

    @property
    def prompt_level(self) -> float:
        """Share of prompts whose every instruction was followed."""
        return self.prompts_followed / self.prompts if self.prompts else 0.0

    @property
    def instruction_level(self) -> float:
        """Share of instructions followed."""
        return self.instructions_followed / self.instructions if self.instructions else 0.0


def accuracy(results: Iterable[PromptResult]) -> Accuracy:
    """Aggregate prompt- and instruction-level accuracy."""
    p = pf = i = f = 0
    for r in results:
        p += 1
        pf += r.follow_all_instructions
        i += len(r.follow_instruction_list)
        f += sum(r.follow_instruction_list)
    return Accuracy(p, pf, i, f)


def run(inputs: Sequence[PromptInput], responses: Mapping[str, str], mode: Mode) -> list[PromptResult]:
    """Evaluate every input whose prompt has a response (``InputError`` if one is missing)."""
    results = []
    for inp in inputs:
        if inp.prompt not in responses:
            raise InputError(f"no response for prompt with key {inp.key}")
        results.append(evaluate_prompt(inp, responses[inp.prompt], mode))
    return results
