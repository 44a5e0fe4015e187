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
    # BookMIA: 8 "books" of 6 snippets, books 0-3 members
    jsonl("bookmia.jsonl", [{"book_id": b, "book": f"Book {b}", "snippet_id": s, "snippet": shakespeare(6 * b + s),
                             "label": int(b < 4)} for b in range(8) for s in range(6)])
    # WikiMIA-2024 Hard: 24 articles, each a member and a non-member version
    jsonl("wikimia_24_hard.jsonl", [
        {"title": f"Article {i}", "date": "2024-01-01", "input": text, "id": f"a{i}", "diff": 500, "label": label}
        for i in range(24) for label, text in ((1, members[i]), (0, nonmembers[i]))])
    # Dolma3 arXiv members and post-cutoff papers
    jsonl("dolma3_arxiv_members.jsonl", [
        {"id": f"m{i}", "text": shakespeare(100 + i, 100), "source": "arxiv", "added": "2023-01-01",
         "created": "2022-01-01", "metadata": "{}"} for i in range(24)])
    jsonl("arxiv_2025.jsonl", [
        {"id": f"n{i}", "text": nonmembers[24 + i] + " " + nonmembers[48 + i], "source": "arxiv", "added": "2025-06-01",
         "created": "2025-05-01", "metadata": "{}"} for i in range(24)])
    # AIME 2025 stand-in (problems with solutions; the config gives the year): AIME 1983-1984, marked
    jsonl("aime_2025.jsonl", [{"problem": "(Rehearsal stand-in) " + r["problem"], "solution": r["solution"],
                               "answer": str(r["answer"]), "aime_number": 1 + i // 15, "problem_number": 1 + i % 15}
                              for i, r in enumerate(aime(1983, 1984)[:24])])
    # the Tulu2 SFT mix as (prompt, completion) rows
    jsonl("tulu2_mix.jsonl", [{"prompt": "Continue the passage: " + words(shakespeare(300 + i), 20),
                               "completion": " ".join(shakespeare(300 + i).split()[20:])} for i in range(48)])
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
    jsonl("aya_unused.jsonl", [{"inputs": "Summarise this passage: " + words(nonmembers[100 + i], 20),
                                "targets": nonmembers[100 + i]} for i in range(40)])
    jsonl("tulu3_wildchat_unused.jsonl", [
        {"id": f"wcu-{i}", "messages": chat("Write a few lines in an old style about " + words(shakespeare(500 + i), 6),
                                            shakespeare(500 + i, 40))} for i in range(40)])
    # WikiMIA-64, arXivTection, BookTection: 30 + 30 passages each (CalibDCD reads every pool text)
    jsonl("wikimia.jsonl", [{"input": t, "label": label} for label, texts in ((1, members), (0, nonmembers))
                            for t in texts[200:230]])
    decop("arxivtection.csv", [(t, f"Paper {i // 5}", 1) for i, t in enumerate(members[150:180])]
          + [(t, f"Paper {10 + i // 5}", 0) for i, t in enumerate(nonmembers[150:180])])
    decop("booktection.csv", [(shakespeare(600 + i), f"Book {i // 6}", int(i < 30)) for i in range(60)])
    # olympiads-ref: proof and answer problems with solutions (AIME 2000-2003 here)
    jsonl("olympiads_ref.jsonl", [{"problem": r["problem"], "solution": r["solution"], "year": r["year"],
                                   "exam": "AIME", "problem_type": "Algebra"} for r in aime(2000, 2003)[:48]])
    # LaRA: each model's RL members, the held-out problems, the RL-MIA filler problems (disjoint years)
    jsonl("lara_eurus_members.jsonl", problems(aime(1988, 1989)[:24]))
    jsonl("lara_limr_members.jsonl", problems(aime(1990, 1991)[:24]))
    jsonl("lara_olmo3_rlzero_members.jsonl", problems(aime(1992, 1993)[:24]))
    jsonl("lara_heldout_math.jsonl", problems(aime(1994, 1995)[:24]))
    jsonl("lara_rl_mia_math.jsonl", problems(aime(1996, 1999)[:48]))


if __name__ == "__main__":
    main()
