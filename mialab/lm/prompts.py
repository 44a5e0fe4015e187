"""Prompt construction for reconstruction rollouts (ADRA Appendix A, Table 11), and one user turn
in a tokenizer's chat template (:func:`format_prompt`, for instruction models given a task).

A prompt is the dataset's template (a ``str.format`` string with a ``{prefix}`` field) filled
with the candidate's prefix. Optionally the first ``p`` of the ground-truth suffix words (at least
``assistant_prefix_min_words``, :func:`mialab.text.prefix.split_assistant_prefix`) are given as the
start of the model's answer (ADRA's assistant prefix, Appendix D.1):

- chat models: a user turn with the filled template, then an assistant turn holding those words,
  rendered by the tokenizer's chat template with ``continue_final_message=True`` so that the
  model continues the answer instead of starting a new one;
- base models: the words are appended to the filled template, separated by one space.
"""

from __future__ import annotations

from mialab.text.prefix import split_assistant_prefix


def fill_template(template: str, prefix: str) -> str:
    """``template.format(prefix=prefix)``; the template must use the ``{prefix}`` field."""
    if "{prefix}" not in template:
        raise ValueError(f"prompt template must contain '{{prefix}}', got {template!r}")
    return template.format(prefix=prefix)


def prompt_text(tokenizer, template: str, prefix: str, suffix: str, *, chat: bool,
                assistant_prefix_ratio: float = 0.0, assistant_prefix_min_words: int = 1) -> str:
    """The full prompt string of one candidate (rule in the module doc)."""
    user = fill_template(template, prefix)
    given, _ = split_assistant_prefix(suffix, assistant_prefix_ratio, assistant_prefix_min_words)
    if not chat:
        return f"{user} {given}" if given else user
    if tokenizer.chat_template is None:
        raise ValueError("chat=True but the tokenizer has no chat template")
    messages = [{"role": "user", "content": user}]
    if given:
        messages.append({"role": "assistant", "content": given})
        return tokenizer.apply_chat_template(messages, tokenize=False, continue_final_message=True)
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def prompt_token_ids(tokenizer, text: str) -> list[int]:
    """Token ids of a prompt; BOS is added only when the rendered text does not already start with it."""
    bos = tokenizer.bos_token
    add_special = not (bos and text.startswith(bos))
    return tokenizer(text, add_special_tokens=add_special)["input_ids"]


def format_prompt(tokenizer, text: str, system: str | None = None) -> str:
    """Wrap ``text`` as one user turn, after a ``system`` turn when given, with the tokenizer's chat
    template; without one, the raw text (after the system prompt and a blank line)."""
    if getattr(tokenizer, "chat_template", None):
        turns = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    return f"{system}\n\n{text}" if system else text
