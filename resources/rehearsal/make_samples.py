"""Write resources/rehearsal/data/: the CPU rehearsal's stand-ins for the paper configs' hub datasets
and user-provided files (resources/rehearsal/datasets.yaml maps each to its sample).

Every sample has the columns the family reads and a few dozen rows cut from the repository's own
resources (Tiny Shakespeare, WikiMIA-64, AIME 1983-2023); no hub text. Deterministic: rerun with
``.venv/bin/python resources/rehearsal/make_samples.py`` from the repository root after a change.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pandas as pd

OUT = Path("resources/rehearsal/data")
WIKI = pd.read_parquet("resources/data/wikimia/WikiMIA_length64.parquet")
AIME = json.loads(Path("resources/data/aime/aime_1983_2023.json").read_text())
SHAKES = Path("resources/data/tinyshakespeare/input.txt").read_text().split()
#: words of each CalibDCD pool text (BookMIA, WikiMIA-64, arXivTection, BookTection): VeilProbe perturbs every pool
#: text whole, with one beam search per token on each of its three attribution models (quadratic in the text's
#: tokens), so the CPU rehearsal reads each passage's first words only (the stand-in tokenizer: ~2 tokens a word)
CALIBDCD_WORDS = 20


def words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


def shakespeare(i: int, n: int = 60) -> str:
    """Passage ``i`` of Tiny Shakespeare: ``n`` words, passages never overlap."""
    return " ".join(SHAKES[i * n:(i + 1) * n])


def wiki(label: int) -> list[str]:
    return [words(t, 60) for t in WIKI.loc[WIKI["label"] == label, "input"]]


def aime(first: int, last: int) -> list[dict]:
    return [r for r in AIME if first <= r["year"] <= last]


def jsonl(name: str, rows: list[dict]) -> None:
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    (OUT / name).write_text(text, encoding="utf-8")


def decop(name: str, texts: list[tuple[str, str, int]]) -> None:
    """DE-COP table: the passage and three word-order paraphrases (B-D), its answer, title and label."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["Example_A", "Example_B", "Example_C", "Example_D", "Answer", "ID", "Label"])
    for text, title, label in texts:
        t = text.split()
        w.writerow([text, " ".join(t[1:] + t[:1]), " ".join(t[2:] + t[:2]), " ".join(t[::-1]), "A", title, label])
    (OUT / name).write_text(buf.getvalue(), encoding="utf-8")


def problems(rows: list[dict]) -> list[dict]:
    return [{"problem": r["problem"], "answer": str(r["answer"])} for r in rows]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    members, nonmembers = wiki(1), wiki(0)
    # BookMIA: 8 "books" of 6 snippets, books 0-3 members (a CalibDCD pool: each snippet its first CALIBDCD_WORDS)
    jsonl("bookmia.jsonl", [{"book_id": b, "book": f"Book {b}", "snippet_id": s,
                             "snippet": words(shakespeare(6 * b + s), CALIBDCD_WORDS),
                             "label": int(b < 4)} for b in range(8) for s in range(6)])
    # WikiMIA-2024 Hard: 24 articles, each a member and a non-member version
    jsonl("wikimia_24_hard.jsonl", [
        {"title": f"Article {i}", "date": "2024-01-01", "input": text, "id": f"a{i}", "diff": 500, "label": label}
        for i in range(24) for label, text in ((1, members[i]), (0, nonmembers[i]))])
    # ADRA-RL/Dolma3-Arxiv-MIA-1k: Dolma3 arXiv members and post-cutoff papers in one labelled table
    jsonl("adra_dolma3_arxiv_mia.jsonl", [
        {"text": text, "meta": json.dumps({"arxiv_id": f"{2200 + 300 * label}.{i:05d}"}), "label": label,
         "id": f"{2200 + 300 * label}.{i:05d}"}
        for i in range(24) for label, text in ((1, shakespeare(100 + i, 100)),
                                               (0, nonmembers[24 + i] + " " + nonmembers[48 + i]))])
    # ADRA-RL/AIME-2021-2025-Cleaned: problems with solutions and their AoPS urls (the year is read from the url),
    # AIME 1983-1986 here, marked, posing as 2021-2025
    jsonl("adra_aime_cleaned.jsonl", [
        {"problem": "(Rehearsal stand-in) " + r["problem"], "solution": r["solution"], "answer": str(r["answer"]),
         "url": f"https://artofproblemsolving.com/wiki/index.php/{2021 + i // 10}_AIME_{'I' * (1 + i % 10 // 5)}"
                f"_Problems/Problem_{1 + i % 5}"} for i, r in enumerate(aime(1983, 1986)[:50])])
    # s1K-1.1: problems with a Gemini and a DeepSeek trace each
    jsonl("s1k_1_1.jsonl", [{
        "solution": str(r["answer"]), "question": r["problem"], "cot_type": "math", "source_type": "aime",
        "metadata": "{}",
        "gemini_thinking_trajectory": "The problem asks for " + words(r["solution"], 30),
        "gemini_attempt": f"The answer is $\\boxed{{{r['answer']}}}$.",
        "deepseek_thinking_trajectory": "Okay, so I need to solve this. " + words(r["solution"], 50)
                                        + " Wait, let me double check. Yes.",
        "deepseek_attempt": f"**Final Answer** $\\boxed{{{r['answer']}}}$"} for r in aime(1985, 1987)[:32]])
    # Tulu3 SFT mix (Aya and WildChat rows) and the rows the mix left out
    chat = lambda user, assistant: [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    mix = [{"id": f"aya-{i}", "source": "ai2-adapt-dev/tulu_v3.9_aya_100k",
            "messages": chat("Summarise this passage: " + words(members[100 + i], 20), members[100 + i])} for i in range(40)]
    mix += [{"id": f"wc-{i}", "source": "ai2-adapt-dev/tulu_v3.9_wildchat_100k",
             "messages": chat("Write a few lines in an old style about " + words(shakespeare(400 + i), 6),
                              shakespeare(400 + i, 40))} for i in range(40)]
    jsonl("tulu3_mix.jsonl", mix)
    # ADRA-RL's processed Aya / WildChat sets: the members (rows of the mix's subset) and the non-members (rows the
    # mix left out), single-turn, with the turn lengths the processing scripts counted
    def processed(rows: list[dict]) -> list[dict]:
        return [{**r, "user_tokens": len(r["messages"][0]["content"].split()),
                 "assistant_tokens": len(r["messages"][1]["content"].split())} for r in rows]

    jsonl("adra_tulu_aya.jsonl", processed([r for r in mix if r["source"].endswith("aya_100k")]))
    jsonl("adra_aya_nonmembers.jsonl", processed([
        {"id": f"ayau-{i}", "dataset": "ai2-adapt-dev/tulu_v3.9_aya_unused",
         "messages": chat("Summarise this passage: " + words(nonmembers[100 + i], 20), nonmembers[100 + i])}
        for i in range(40)]))
    jsonl("adra_tulu_wildchat.jsonl", processed([r for r in mix if r["source"].endswith("wildchat_100k")]))
    jsonl("adra_wildchat_nonmembers.jsonl", processed([
        {"conversation_hash": f"h{i}", "messages": chat("Write a few lines in an old style about "
                                                        + words(shakespeare(500 + i), 6), shakespeare(500 + i, 40))}
        for i in range(40)]))
    # WikiMIA-64, arXivTection, BookTection: 24 + 24 passages each (as BookMIA: the rehearsal's split of 8 + 8, its
    # 10 + 10 supervised texts and 4 calibration non-members, disjoint), each its first CALIBDCD_WORDS (CalibDCD
    # reads and VeilProbe perturbs every pool text)
    cut = lambda text: words(text, CALIBDCD_WORDS)
    jsonl("wikimia.jsonl", [{"input": cut(t), "label": label} for label, texts in ((1, members), (0, nonmembers))
                            for t in texts[200:224]])
    decop("arxivtection.csv", [(cut(t), f"Paper {i // 5}", 1) for i, t in enumerate(members[150:174])]
          + [(cut(t), f"Paper {10 + i // 5}", 0) for i, t in enumerate(nonmembers[150:174])])
    decop("booktection.csv", [(cut(shakespeare(600 + i)), f"Book {i // 6}", int(i < 24)) for i in range(48)])
    # ADRA-RL/Olympiads-Cleaned: proof and answer problems with solutions (AIME 2000-2003 here)
    jsonl("adra_olympiads_cleaned.jsonl", [{"problem": r["problem"], "solution": r["solution"], "year": r["year"],
                                            "exam": "AIME", "problem_type": "Algebra"} for r in aime(2000, 2003)[:48]])
    # LaRA (github talzoomanzoo/rl-data-contamination-mj): each model's benchmark (its RL members and AIME 2026 as
    # chat prompts, member column; Olmo's non-members twice, as there), AIME 2025 (problem, answer), and each
    # model's RL training set on the hub (its members again, and the RL-MIA filler problems: member 0)
    heldout = problems(aime(1994, 1995)[:24])
    for model, first in (("eurus", 1988), ("limr", 1990), ("olmo", 1992)):
        rl = problems(aime(first, first + 1)[:12])
        twice = 2 if model == "olmo" else 1
        jsonl(f"lara_{model}_benchmark.jsonl", [
            {"data_source": source, "prompt": lara_prompt(r["problem"]), "answer": r["answer"], "member": member}
            for member, source, rows in ((0, "aime26", heldout[:12] * twice), (1, model, rl)) for r in rows])
        fillers = problems(aime(1996, 1999)[:48])
        jsonl(f"lara_{model}_rl_train.jsonl", [
            {"data_source": source, "prompt": lara_prompt(r["problem"]),
             "reward_model": {"ground_truth": r["answer"], "style": "rule"}, "member": member}
            for member, source, rows in ((1, model, rl), (0, "olympiads", fillers)) for r in rows])
    jsonl("lara_aime25.jsonl", [{**r, "id": str(i)} for i, r in enumerate(heldout[12:])])


def lara_prompt(problem: str) -> list[dict]:
    """A LaRA benchmark prompt: a system turn, then the problem with the code's answer instruction."""
    return [{"content": "Reason step by step.", "role": "system"},
            {"content": problem + "\n\nPresent the answer in LaTex format: \\boxed{Your answer}", "role": "user"}]


if __name__ == "__main__":
    main()
