"""The RL-contamination corpus: a pool's member problems plus filler problems, as GRPO prompts.

As in the LaRA paper's continued-RL setting, the corpus holds the deliberate contamination
targets (the pool's label-1 rows, or only one split's: ``members.split_seed``), each
``members.repeats`` times (default once; 0 is the no-members control, its places taken by more
fillers), and filler problems; the pool's non-members never enter it.
Assembly (seeded order, fillers never equal to a pool question) is :func:`build_rl_corpus`.

The question of a pool row (:func:`pool_questions`):

- ``request``: request + response pools (``aime``, ``s1``, ``tulu3``, ...; ``prefix = request +
  "\\n\\n" + head``, see :mod:`mialab.data.families._common`): the prefix before its last blank
  line. The response is ``head + " " + suffix``;
- ``text``: pools whose ``text`` is the question itself (``lara_rl``).

Whitespace is normalised and a question is cut to its first ``max_words`` words (the tiny
world's 256-token models need short prompts).

The prompt (:func:`render_prompt`): ``template`` filled with the question, as plain text, or with ``chat``
as a conversation (an optional ``system`` turn, then the user turn), which the trainer renders with the
model's chat template and its generation prompt, as verl's RL dataset does
(``apply_chat_template(add_generation_prompt=True)``). Fillers take ``filler_template`` / ``filler_system``
where given (the LaRA code's corpora: members with the Eurus-2 system turn and its answer-format line,
fillers with the OpenR1 system turn and the bare problem). The reference a reward compares a completion with
(:func:`pool_references`) is the ``response`` or the pool's ``answer`` column. Fillers come from
a corpus spec with two columns, question and reference (:func:`mialab.data.corpus.read_corpus`
joins them with a blank line and caps the reference at ``max_words``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mialab.data.corpus import read_corpus
from mialab.data.families._common import content_id
from mialab.data.sources import require_columns
from mialab.text.prefix import truncate_words

QUESTION_RULES = ("request", "text")
REFERENCE_RULES = ("response", "answer")
CORPUS_COLUMNS = ["id", "prompt", "question", "reference", "target", "source"]


def split_request(text: str) -> tuple[str, str]:
    """``(request, rest)`` of ``request + "\\n\\n" + rest`` where ``rest`` has no blank line."""
    request, sep, rest = text.rpartition("\n\n")
    if not sep:
        raise ValueError(f"no blank line separates a request from its response in {text[:80]!r}")
    return request, rest


def normalise_question(text: str, max_words: int | None = None) -> str:
    """Whitespace-normalised ``text`` cut to its first ``max_words`` words."""
    return truncate_words(" ".join(str(text).split()), max_words)


def pool_questions(pool: pd.DataFrame, rule: str = "request", max_words: int | None = None) -> pd.Series:
    """The question of every pool row (module doc), aligned with ``pool``."""
    if rule == "request":
        raw = pool["prefix"].map(lambda p: split_request(p)[0])
    elif rule == "text":
        raw = pool["text"]
    else:
        raise ValueError(f"unknown question rule {rule!r}; known: {', '.join(QUESTION_RULES)}")
    return raw.map(lambda q: normalise_question(q, max_words))


def pool_references(pool: pd.DataFrame, rule: str = "response") -> pd.Series:
    """What a reward compares a member's completion with: its response or its ``answer``."""
    if rule == "response":
        return pool["prefix"].map(lambda p: split_request(p)[1]).str.cat(pool["suffix"], sep=" ").str.strip()
    if rule == "answer":
        return pool["answer"].astype(str)
    raise ValueError(f"unknown reference rule {rule!r}; known: {', '.join(REFERENCE_RULES)}")


def filler_problems(spec: dict, max_words: int | None = None) -> pd.DataFrame:
    """Filler ``problem`` and ``reference`` from a two-column corpus spec (question, reference)."""
    if len(spec.get("columns", [])) != 2:
        raise ValueError(f"RL filler {spec.get('source')!r}: 'columns' must name the question and the reference")
    pairs = [split_request(t) for t in read_corpus(spec)]
    return pd.DataFrame({"problem": [normalise_question(q, max_words) for q, _ in pairs],
                         "reference": [r for _, r in pairs]})


def split_members(split: pd.DataFrame, pool: pd.DataFrame) -> set[str]:
    """Ids of the split's members (label 1), each checked to be a member of ``pool``."""
    ids = set(split.loc[split["label"] == 1, "id"].astype(str))
    unknown = ids - set(pool.loc[pool["label"] == 1, "id"].astype(str))
    if unknown:
        raise ValueError(f"{len(unknown)} member(s) of the split are no members of the pool, "
                         f"e.g. {sorted(unknown)[:3]}")
    return ids


def render_prompt(question: str, template: str, system: str | None = None, chat: bool = False) -> str | list[dict]:
    """``template`` filled with ``question``: the text, or with ``chat`` the conversation ``[system turn,] user turn``
    (module doc); a system turn needs ``chat``."""
    text = template.format(question=question)
    if not chat:
        if system is not None:
            raise ValueError("a system turn needs chat: true (the prompt rendered as a conversation)")
        return text
    return [*([{"role": "system", "content": system}] if system is not None else []), {"role": "user", "content": text}]


def build_corpus(pool: pd.DataFrame, fillers: pd.DataFrame, *, size: int, seed: int = 0, question: str = "request",
                 reference: str = "response", max_words: int | None = None, reference_max_words: int | None = None,
                 template: str = "{question}", system: str | None = None, chat: bool = False,
                 filler_template: str | None = None, filler_system: str | None = None,
                 member_ids: set[str] | None = None, repeats: int = 1) -> pd.DataFrame:
    """The RL corpus (:data:`CORPUS_COLUMNS`): the members of ``pool`` (each ``repeats`` times) plus
    fillers up to ``size`` distinct problems.

    ``member_ids`` keeps only those members (a split's, :func:`split_members`: the RL-MIA-style corpus
    of the evaluated members plus fillers); no filler equals any pool question either way.
    ``prompt`` is the question rendered by :func:`render_prompt` (``template``, ``system``, ``chat``; a filler's
    with ``filler_template`` / ``filler_system`` where given); ``target`` marks the members.
    ``reference_max_words`` cuts every reference to its first words (what a short completion can
    reach, so a reconstruction reward is not dominated by its length penalty).
    """
    label = pool["label"] if member_ids is None else pool["label"] * pool["id"].astype(str).isin(member_ids)
    members = pd.DataFrame({"id": pool["id"], "text": pool_questions(pool, question, max_words),
                            "answer": pool_references(pool, reference), "label": label,
                            "source": pool["source"]})
    corpus = build_rl_corpus(members, fillers, size=size, seed=seed, problem_column="problem",
                             answer_column="reference", repeats=repeats)
    corpus = corpus.rename(columns={"problem": "question", "answer": "reference"})
    corpus["reference"] = corpus["reference"].map(lambda r: truncate_words(r, reference_max_words))
    member = (template, system)
    filler = (template if filler_template is None else filler_template,
              system if filler_system is None else filler_system)
    corpus["prompt"] = [render_prompt(q, *(member if target else filler), chat=chat)
                        for q, target in zip(corpus["question"], corpus["target"])]
    return corpus[CORPUS_COLUMNS]


def build_rl_corpus(split: pd.DataFrame, fillers: pd.DataFrame, *, size: int = 1000, seed: int = 0,
                    problem_column: str = "problem", answer_column: str = "answer", repeats: int = 1) -> pd.DataFrame:
    """RL training corpus of ``size`` distinct problems: every member of ``split`` plus seeded fillers.

    Each member appears ``repeats`` times (its exposure per epoch); with ``repeats`` 0 no member does
    and fillers fill all ``size`` places (the no-members control of an exposure sweep).

    ``split`` is a sampled ``lara_rl`` split (columns ``text``, ``answer``, ``label``); fillers
    equal (after whitespace normalisation) to any problem of the split, member or non-member, are
    excluded so non-members stay unseen. Returns ``id, problem, answer, target, source`` in a
    seeded random order; ``target`` marks the contamination targets.
    """
    require_columns(split, ["id", "text", "answer", "label"], source="lara_rl split")
    require_columns(fillers, [problem_column, answer_column], source="filler problems")
    if repeats < 0:
        raise ValueError(f"lara_rl: members.repeats must be >= 0, got {repeats}")
    targets = split[split["label"] == 1]
    n_fill = size - len(targets) if repeats else size
    if n_fill < 0:
        raise ValueError(f"lara_rl: corpus size {size} is smaller than the {len(targets)} members")
    pool = pd.DataFrame({"problem": fillers[problem_column].map(lambda p: " ".join(str(p).split())),
                         "answer": fillers[answer_column].astype(str).str.strip()})
    pool = pool[~pool["problem"].isin(set(split["text"])) & (pool["problem"] != "")].drop_duplicates("problem")
    pool["id"] = [content_id("lara_rl-filler", p) for p in pool["problem"]]
    pool = pool.sort_values("id").reset_index(drop=True)
    if len(pool) < n_fill:
        raise ValueError(f"lara_rl: {n_fill} fillers needed, only {len(pool)} distinct problems not in the split")
    rng = np.random.default_rng(seed)
    chosen = pool.iloc[np.sort(rng.choice(len(pool), size=n_fill, replace=False))]
    corpus = pd.concat([
        *[pd.DataFrame({"id": targets["id"], "problem": targets["text"], "answer": targets["answer"],
                        "target": True, "source": targets["source"]})] * int(repeats),
        chosen.assign(target=False, source="filler")[["id", "problem", "answer", "target", "source"]],
    ], ignore_index=True)
    return corpus.iloc[rng.permutation(len(corpus))].reset_index(drop=True)


def stage_corpus(spec: dict, pool: pd.DataFrame, split: pd.DataFrame | None = None) -> pd.DataFrame:
    """Rule ``rl_contaminate``'s corpus from a model's config entry: the pool's members (only the split's,
    when ``members.split_seed`` gives one), ``members.repeats`` times each, plus the entry's filler problems."""
    corpus_spec = spec["corpus"]
    fillers = filler_problems(spec["filler"], max_words=corpus_spec.get("max_words"))
    member_ids = split_members(split, pool) if split is not None else None
    return build_corpus(pool, fillers, **corpus_spec, member_ids=member_ids, repeats=spec["members"].get("repeats", 1))
