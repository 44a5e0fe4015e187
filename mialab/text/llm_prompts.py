"""Plumbing for LLM-backed perturbation backends: prompt templates, list parsing, re-prompting.

Every LLM backend takes a ``generate(prompts: list[str], *, attempt: int) -> list[str]`` callable (one
completion per prompt; ``attempt`` numbers the rounds of :func:`collect_items`, so that a sampling engine
asked again answers from a fresh seed, :func:`mialab.lm.engine.text_generator`), so any engine
(transformers, vLLM rollouts, an API) can be plugged in.
Templates live in ``resources/prompts/lara/NAME.txt`` and use ``str.format`` fields.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Callable

from mialab.core.paths import PROMPTS

Generate = Callable[..., list[str]]

PROMPT_DIR = PROMPTS / "lara"

_ENUMERATED = re.compile(r"^\s*(?:[-*\u2022]|\(?\d{1,3}[.):]|\d{1,3}\s+-)\s+(.*)$")
_JSON_LIST = re.compile(r"\[\s*\"")
_FENCE = re.compile(r"^\s*```[\w-]*\s*$", re.MULTILINE)


def load_template(name: str | Path) -> str:
    """Read a prompt template: an existing file path, or a name under ``resources/prompts/lara``."""
    path = Path(name)
    if not path.is_file():
        path = PROMPT_DIR / f"{name}.txt"
    if not path.is_file():
        known = sorted(p.stem for p in PROMPT_DIR.glob("*.txt"))
        raise FileNotFoundError(f"unknown prompt template {str(name)!r}; known: {', '.join(known)}")
    return path.read_text()


def normalise_text(text: str) -> str:
    """Case- and whitespace-insensitive key, used to spot duplicates of a question."""
    return " ".join(text.lower().split())


def _strip_quotes(item: str) -> str:
    item = item.strip()
    if len(item) >= 2 and item[0] == item[-1] and item[0] in "\"'":
        item = item[1:-1].strip()
    return item


def parse_list(output: str) -> list[str]:
    """Items of an LLM's list answer: a JSON string array, an enumerated list, or plain lines.

    Enumerated items may span several lines (continuations are joined); when the answer is
    enumerated, lines before the first item (a preamble) are dropped.
    """
    text = _FENCE.sub("", output)
    start = _JSON_LIST.search(text)
    if start is not None and "]" in text[start.start():]:
        try:
            items = json.loads(text[start.start(): text.rindex("]") + 1])
        except json.JSONDecodeError:
            items = None
        if isinstance(items, list) and all(isinstance(x, str) for x in items):
            return [x.strip() for x in items if x.strip()]
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not any(_ENUMERATED.match(ln) for ln in lines):
        return [_strip_quotes(ln) for ln in lines if _strip_quotes(ln)]
    items: list[str] = []
    for ln in lines:
        m = _ENUMERATED.match(ln)
        if m:
            items.append(m.group(1).strip())
        elif items:
            items[-1] = f"{items[-1]} {ln.strip()}"
    return [_strip_quotes(x) for x in items if _strip_quotes(x)]


def collect_items(prompts: list[str], generate: Generate, accept: Callable[[int, str], list[str]],
                  n_items: int, *, max_attempts: int = 3, what: str = "items", min_items: int | None = None,
                  fallback: Callable[[list[int]], list[list[str]]] | None = None) -> list[list[str]]:
    """Ask ``generate`` until each prompt has ``n_items`` distinct accepted items (after ``max_attempts``, a prompt
    with ``min_items`` of them keeps those).

    ``accept(i, completion)`` returns the valid items found in prompt ``i``'s completion. Only
    prompts still short of items are sent again, as round ``attempt`` (a sampling engine answers them
    from a fresh seed; a greedy one repeats itself). Still short after ``max_attempts`` rounds:
    ValueError naming them, or, given ``fallback(indices) -> items``, those prompts' items from it
    instead (logged).
    """
    items: list[list[str]] = [[] for _ in prompts]
    for attempt in range(max_attempts):
        todo = [i for i, got in enumerate(items) if len(got) < n_items]
        if not todo:
            break
        outputs = generate([prompts[i] for i in todo], attempt=attempt)
        if len(outputs) != len(todo):
            raise ValueError(f"generate returned {len(outputs)} completions for {len(todo)} prompts")
        for i, out in zip(todo, outputs):
            seen = {normalise_text(x) for x in items[i]}
            for item in accept(i, out):
                key = normalise_text(item)
                if len(items[i]) < n_items and key not in seen:
                    items[i].append(item)
                    seen.add(key)
    short = [i for i, got in enumerate(items) if len(got) < (n_items if min_items is None else min_items)]
    if short and fallback is not None:
        logging.getLogger(__name__).warning("%s: %d of %d prompt(s) still invalid after %d attempt(s) take the "
                                            "fallback", what, len(short), len(prompts), max_attempts)
        for i, got in zip(short, fallback(short), strict=True):
            items[i] = got
        short = []
    if short:
        raise ValueError(f"{what}: {len(short)} prompt(s) still lack {min_items or n_items} valid item(s) after "
                         f"{max_attempts} attempt(s), e.g. prompt indices {short[:5]}")
    return items
