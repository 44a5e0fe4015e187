"""Controlled views: query constructions that change only the query prefix or the generation boundary.

CalibDCD (Sec. 4.1, 5.1) probes the target under ten fixed controlled views, eight universal
response-format views and two model-specific chat-template views, and compares each with the
detector's original query ``e0``. A view is ``before + text + after``: the text itself is never
changed, so every feature shift between a view and ``e0`` comes from the query format alone.

Universal views put a response-format cue ("Assistant:", "Answer:", ...) before the text.
Family views wrap the text as a user turn in the family's chat template and open the assistant
turn (the generation boundary); the two views of a family differ only in that boundary:

- ``qwen``: Qwen2.5-Instruct template (with its default system prompt), with or without an extra
  newline separator after the assistant header.
- ``llama``: Llama-3.1-Instruct, a compact user/assistant header vs the official header (system
  turn with the knowledge-cutoff lines).
- ``deepseek``: DeepSeek-R1-Distill, with or without the reasoning opener ``<think>\\n``.
- ``tiny``: the tiny world's own chat template (``mialab.lm.tiny.TINY_CHAT_TEMPLATE``), the
  text as a user turn followed by the assistant header, or the text as the start of the
  assistant turn (``continue_final_message``).

No view contains a BOS token: the target's tokenizer adds it, as it does for ``e0``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

ORIGINAL = "original"

_SENTINEL = "\x00TEXT\x00"


@dataclass(frozen=True)
class View:
    """A query construction ``before + text + after``; ``text`` is kept verbatim."""

    name: str
    before: str = ""
    after: str = ""

    def __call__(self, text: str) -> str:
        return f"{self.before}{text}{self.after}"


def _tiny_view(name: str, messages_role: str, **render_kwargs) -> View:
    """Render the tiny world's chat template around a sentinel and keep what surrounds it."""
    import jinja2

    from mialab.lm.tiny import TINY_CHAT_TEMPLATE

    template = jinja2.Environment().from_string(TINY_CHAT_TEMPLATE)
    rendered = template.render(messages=[{"role": messages_role, "content": _SENTINEL}], **render_kwargs)
    before, after = rendered.split(_SENTINEL)
    return View(name, before, after)


_QWEN_HEAD = ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
              "<|im_start|>user\n")
_QWEN_TAIL = "<|im_end|>\n<|im_start|>assistant\n"
_LLAMA_USER = "<|start_header_id|>user<|end_header_id|>\n\n"
_LLAMA_TAIL = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
_LLAMA_SYSTEM = ("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                 "Today Date: 26 Jul 2024\n\n<|eot_id|>")

UNIVERSAL_VIEWS: tuple[View, ...] = tuple(
    View(f"cue_{cue.lower()}", f"{cue}: ")
    for cue in ("Assistant", "Answer", "Reasoning", "Summary", "Response", "Output", "Explanation", "Continuation")
)

FAMILY_VIEWS: dict[str, tuple[View, View]] = {
    "qwen": (View("qwen_chat", _QWEN_HEAD, _QWEN_TAIL), View("qwen_chat_sep", _QWEN_HEAD, _QWEN_TAIL + "\n")),
    "llama": (View("llama_compact", _LLAMA_USER, _LLAMA_TAIL),
              View("llama_official", _LLAMA_SYSTEM + _LLAMA_USER, _LLAMA_TAIL)),
    "deepseek": (View("deepseek_chat", "<｜User｜>", "<｜Assistant｜>"),
                 View("deepseek_think", "<｜User｜>", "<｜Assistant｜><think>\n")),
    "tiny": (_tiny_view("tiny_chat", "user", add_generation_prompt=True),
             _tiny_view("tiny_assistant_prefill", "assistant", continue_final_message=True)),
}

VIEWS: dict[str, View] = {v.name: v for v in (View(ORIGINAL), *UNIVERSAL_VIEWS,
                                               *(v for pair in FAMILY_VIEWS.values() for v in pair))}


def controlled_views(family: str) -> list[str]:
    """The ten controlled view names for a model family: 8 universal + the family's 2 (``e0`` excluded)."""
    if family not in FAMILY_VIEWS:
        raise KeyError(f"unknown model family {family!r}; known: {sorted(FAMILY_VIEWS)}")
    return [v.name for v in UNIVERSAL_VIEWS] + [v.name for v in FAMILY_VIEWS[family]]


def get_view(name: str) -> View:
    """The view registered under ``name`` (``original`` is ``e0``, the identity)."""
    try:
        return VIEWS[name]
    except KeyError:
        raise KeyError(f"unknown view {name!r}; known: {sorted(VIEWS)}") from None


def apply_view(name: str, texts: Sequence[str]) -> list[str]:
    """Build the queries of view ``name`` for ``texts``."""
    view = get_view(name)
    return [view(t) for t in texts]
