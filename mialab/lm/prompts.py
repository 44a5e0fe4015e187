"""Prompt construction for reconstruction rollouts (ADRA Appendix A, Table 11), and one user turn
in a tokenizer's chat template (:func:`format_prompt`, for instruction models given a task).

A prompt is the dataset's template (a ``str.format`` string with a ``{prefix}`` field) filled
with the candidate's prefix. Optionally the first ``p`` of the ground-truth suffix words (at least
``assistant_prefix_min_words``, :func:`mialab.text.prefix.split_assistant_prefix`) are given as the
start of the model's answer (ADRA's assistant prefix, Appendix D.1). Its rendering, the
``prompt_format`` (:data:`PROMPT_FORMATS`; config ``n_sampling.prompt_format`` and ``chat_models``):

- ``verl``: as the released ADRA code's verl fork renders every prompt (its RL dataset and its generation
  script): a user turn with the filled template, then an assistant turn holding those words, rendered by
  the tokenizer's chat template with ``continue_final_message=True`` (the generation prompt when no word
  is given); a tokenizer without a chat template gets verl's fallback template
  (``resources/prompts/adra/verl_fallback_chat_template.jinja``: ``User: <text>`` / ``Assistant: <words>``);
  the ids are the rendered text's tokens, no special token added (:func:`prompt_token_ids`);
- ``chat``: the same turns through the tokenizer's own chat template (it must have one), a BOS token
  added where the tokenizer adds one and the text does not start with it;
- ``plain``: the words appended to the filled template, separated by one space, a BOS token added
  likewise (the paper's Table 11 prompts).
"""

from __future__ import annotations

from mialab.core.paths import PROMPTS
from mialab.text.prefix import split_assistant_prefix

PROMPT_FORMATS = ("verl", "chat", "plain")
#: the chat template verl gives a tokenizer that has none (the released code's ``main_ppo.py`` and
#: ``main_generation.py``; one trailing newline of the file is not part of it)
VERL_FALLBACK_TEMPLATE = PROMPTS / "adra" / "verl_fallback_chat_template.jinja"


def check_prompt_format(prompt_format: str) -> str:
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"unknown prompt format {prompt_format!r}; known: {', '.join(PROMPT_FORMATS)}")
    return prompt_format


def verl_fallback_template() -> str:
    text = VERL_FALLBACK_TEMPLATE.read_text(encoding="utf-8")
    return text[:-1] if text.endswith("\n") else text


def fill_template(template: str, prefix: str) -> str:
    """``template.format(prefix=prefix)``; the template must use the ``{prefix}`` field."""
    if "{prefix}" not in template:
        raise ValueError(f"prompt template must contain '{{prefix}}', got {template!r}")
    return template.format(prefix=prefix)


def prompt_text(tokenizer, template: str, prefix: str, suffix: str, *, prompt_format: str,
                assistant_prefix_ratio: float = 0.0, assistant_prefix_min_words: int = 1) -> str:
    """The full prompt string of one candidate (``prompt_format``: the module doc's rules)."""
    user = fill_template(template, prefix)
    given, _ = split_assistant_prefix(suffix, assistant_prefix_ratio, assistant_prefix_min_words)
    if check_prompt_format(prompt_format) == "plain":
        return f"{user} {given}" if given else user
    chat_template = tokenizer.chat_template
    if chat_template is None:
        if prompt_format == "chat":
            raise ValueError("prompt format 'chat' needs a tokenizer with a chat template")
        chat_template = verl_fallback_template()
    messages = [{"role": "user", "content": user}]
    if given:
        messages.append({"role": "assistant", "content": given})
        return tokenizer.apply_chat_template(messages, chat_template=chat_template, tokenize=False,
                                             continue_final_message=True)
    return tokenizer.apply_chat_template(messages, chat_template=chat_template, tokenize=False,
                                         add_generation_prompt=True)


def prompt_token_ids(tokenizer, text: str, prompt_format: str) -> list[int]:
    """Token ids of a prompt: ``verl``, the text's tokens alone (verl tokenizes the rendered prompt without
    special tokens); else BOS is added only when the rendered text does not already start with it."""
    if check_prompt_format(prompt_format) == "verl":
        return tokenizer(text, add_special_tokens=False)["input_ids"]
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
