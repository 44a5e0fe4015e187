"""Dataset families on real rows (shared/data) and on tiny files of the hub-only shapes, plus
per-seed sampling, the LaRA RL corpus and the CalibDCD partition."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from mialab.core.io import write_parquet
from mialab.data.families.calibdcd import calibdcd_partition
from mialab.data.registry import get_family
from mialab.data.rl_corpus import build_rl_corpus
from mialab.data.sampling import sample_split
from mialab.data.schema import validate_split

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"  # the benchmark copies beside the repository
FIX = ROOT / "tests" / "fixtures"
ARXIVTECTION = str(SHARED / "arxivtection" / "arXivTection.csv")
MIMIR = str(SHARED / "mimir_ngram7")
AIME_TRAIN = str(ROOT / "resources" / "data" / "aime" / "aime_1983_2023.json")
AIME_2025 = str(ROOT / "resources" / "data" / "aime" / "aime_2025_answers_only.jsonl")

needs_data = pytest.mark.skipif(not Path(ARXIVTECTION).is_file(), reason="shared/data not available")


def pool(family: str, **spec) -> pd.DataFrame:
    return validate_split(get_family(family)(spec), name=family)


def n_words(s: str) -> int:
    return len(s.split())


# --- families on real rows -------------------------------------------------------------------

@pytest.fixture(scope="module")
def arxiv_pool() -> pd.DataFrame:
    return pool("arxivtection", source=ARXIVTECTION)


@needs_data
def test_arxivtection_real_rows_counts_and_prefix_rule(arxiv_pool):
    raw = pd.read_csv(ARXIVTECTION)
    # 1549 rows, one with an empty passage: 1548 candidates, 762 members / 786 non-members
    assert len(arxiv_pool) == 1548
    assert arxiv_pool["label"].value_counts().to_dict() == {0: 786, 1: 762}
    first = " ".join(raw.loc[0, "Example_A"].split())
    row = arxiv_pool[arxiv_pool["text"] == first].iloc[0]
    k = math.floor(0.5 * n_words(first))
    assert row["prefix"] == " ".join(first.split()[:k]) and row["suffix"] == " ".join(first.split()[k:])
    assert row["text"] == row["prefix"] + " " + row["suffix"]
    assert row["group"] == raw.loc[0, "ID"] and row["label"] == raw.loc[0, "Label"]


@needs_data
@pytest.mark.parametrize("domain,members,nonmembers", [("dm", 1000, 89), ("github", 1000, 268)])
def test_mimir_real_domains(domain, members, nonmembers):
    p = pool("mimir", source=MIMIR, domain=domain)
    assert p["label"].value_counts().to_dict() == {1: members, 0: nonmembers}
    assert (p["group"] == domain).all() and p["id"].str.startswith(f"mimir_{domain}-").all()
    row = p.iloc[0]
    assert n_words(row["prefix"]) == math.floor(0.5 * n_words(row["text"]))


@needs_data
def test_mimir_unknown_domain_lists_known_ones():
    with pytest.raises(FileNotFoundError, match="pile_cc"):
        get_family("mimir")({"source": MIMIR, "domain": "nope"})


def test_lara_rl_pool_sample_and_rl_corpus():
    p = pool("lara_rl", source=AIME_TRAIN, nonmember_source=AIME_2025, model="toy")
    assert p["label"].value_counts().to_dict() == {1: 975, 0: 30}
    split = sample_split(p, 30, seed=0)
    assert split["label"].value_counts().to_dict() == {1: 30, 0: 30}
    fillers = pd.read_json(AIME_TRAIN)
    corpus = build_rl_corpus(split, fillers, size=500, seed=0)
    assert len(corpus) == 500 and corpus["problem"].is_unique
    members = split[split["label"] == 1]
    assert set(members["text"]) <= set(corpus["problem"])
    assert corpus["target"].sum() == 30 and set(corpus.loc[corpus["target"], "id"]) == set(members["id"])
    assert not set(split.loc[split["label"] == 0, "text"]) & set(corpus["problem"])
    answers = dict(zip(members["text"], members["answer"]))
    assert all(corpus.set_index("problem").loc[q, "answer"] == a for q, a in answers.items())
    assert corpus.equals(build_rl_corpus(split, fillers, size=500, seed=0))
    assert not corpus["id"].equals(build_rl_corpus(split, fillers, size=500, seed=1)["id"])
    with pytest.raises(ValueError, match="fillers needed"):
        build_rl_corpus(split, fillers, size=2000)


@needs_data
def test_calibdcd_partition_sizes_and_disjointness(arxiv_pool):
    parts = calibdcd_partition(arxiv_pool, seed=0)
    train, cal, ev = parts["train"], parts["calibration"], parts["evaluate"]
    assert train["label"].value_counts().to_dict() == {1: 50, 0: 50}
    assert ev["label"].value_counts().to_dict() == {1: 712, 0: 736}  # the paper's Table 1
    assert len(cal) == 100 and (cal["label"] == 0).all()
    assert not set(train["id"]) & set(ev["id"]) and not set(train["id"]) & set(cal["id"])
    assert set(cal["id"]) <= set(ev["id"])
    apart = calibdcd_partition(arxiv_pool, seed=0, calibration_in_evaluation=False)
    assert len(apart["evaluate"]) == 1348 and not set(apart["calibration"]["id"]) & set(apart["evaluate"]["id"])
    assert not set(calibdcd_partition(arxiv_pool, seed=1)["train"]["id"]) & set(train["id"])


# --- families on files of the hub-only shapes ------------------------------------------------

def test_bookmia_fixture():
    p = pool("bookmia", source=str(FIX / "bookmia.jsonl"))
    assert len(p) == 6 and p["label"].sum() == 4
    assert set(p["group"]) == {"The Quiet Harbour", "Letters from the Valley", "Signal Lost"}
    for _, row in p.iterrows():
        assert n_words(row["prefix"]) == math.floor(n_words(row["text"]) / 2)


def test_booktection_fixture():
    p = pool("booktection", source=str(FIX / "booktection.csv"))
    assert p["label"].value_counts().to_dict() == {1: 2, 0: 2}
    assert set(p["group"]) == {"The Keeper", "Drone City"} and p["id"].str.startswith("booktection-").all()


def test_wikimia_24_hard_keeps_pairs(tmp_path):
    p = pool("wikimia_24_hard", source=str(FIX / "wikimia_24_hard.jsonl"))
    assert len(p) == 6 and p["pair_id"].nunique() == 3
    assert (p.groupby("pair_id")["label"].agg(sorted).map(tuple) == (0, 1)).all()
    rows = [json.loads(x) for x in (FIX / "wikimia_24_hard.jsonl").read_text().splitlines()]
    broken = tmp_path / "broken.jsonl"
    broken.write_text("".join(json.dumps(r) + "\n" for r in rows[1:]))  # first article loses its member
    assert pool("wikimia_24_hard", source=str(broken))["pair_id"].nunique() == 2


def test_dolma3_arxiv_fixture_truncates():
    spec = dict(source=str(FIX / "dolma3_arxiv_members.jsonl"),
                nonmember_source=str(FIX / "dolma3_arxiv_nonmembers.jsonl"))
    p = pool("dolma3_arxiv", **spec)
    assert p["label"].value_counts().to_dict() == {1: 2, 0: 2}
    short = pool("dolma3_arxiv", **spec, max_words=10)
    assert short["text"].map(n_words).eq(10).all() and short["prefix"].map(n_words).eq(5).all()


def test_wikimia_24_hard_filters_and_pairs_by_title_and_id_as_the_code(tmp_path):
    # Two articles share a title but not an id: paired by title alone they would form one bad group.
    words = lambda n, w: " ".join([w] * n)
    rows = [{"title": "T", "id": 1, "diff": 500, "label": 1, "input": words(30, "a")},
            {"title": "T", "id": 1, "diff": 500, "label": 0, "input": words(30, "b")},
            {"title": "T", "id": 2, "diff": 900, "label": 1, "input": words(30, "c")},
            {"title": "T", "id": 2, "diff": 900, "label": 0, "input": words(30, "d")},
            {"title": "U", "id": 3, "diff": 100, "label": 1, "input": words(30, "e")},   # diff <= 400
            {"title": "U", "id": 3, "diff": 100, "label": 0, "input": words(30, "f")},
            {"title": "V", "id": 4, "diff": 800, "label": 1, "input": words(3, "g")},    # too short
            {"title": "V", "id": 4, "diff": 800, "label": 0, "input": words(30, "h")}]
    src = tmp_path / "w.jsonl"
    pd.DataFrame(rows).to_json(src, orient="records", lines=True)
    assert len(pool("wikimia_24_hard", source=str(src))) == 4  # by title: T has 4 rows, dropped; U and V kept
    coded = pool("wikimia_24_hard", source=str(src), pair_column=["title", "id"], diff_threshold=400)
    assert len(coded) == 6 and coded["pair_id"].nunique() == 3
    from mialab.lm.tiny import train_tokenizer

    train_tokenizer([" ".join("abcdefgh")] * 20, vocab_size=300).save_pretrained(tmp_path / "tok")
    short = pool("wikimia_24_hard", source=str(src), pair_column=["title", "id"], diff_threshold=400,
                 min_tokens=10, max_tokens=100, tokenizer=str(tmp_path / "tok"))
    assert sorted(short["suffix"].str[-1].unique()) == ["a", "b", "c", "d"]  # V lost its member, so its pair


def test_dolma3_arxiv_truncates_in_tokens_as_the_code(tmp_path):
    # The code: the first 2048 tokens of a tokenizer, decoded; here 12 tokens of a tiny BPE tokenizer.
    from mialab.lm.tiny import train_tokenizer

    spec = dict(source=str(FIX / "dolma3_arxiv_members.jsonl"),
                nonmember_source=str(FIX / "dolma3_arxiv_nonmembers.jsonl"))
    texts = pd.concat([pd.read_json(spec[k], lines=True)["text"] for k in ("source", "nonmember_source")])
    tok = train_tokenizer(list(texts) * 5, vocab_size=400)
    tok.save_pretrained(tmp_path / "tok")
    p = pool("dolma3_arxiv", **spec, max_tokens=12, tokenizer=str(tmp_path / "tok"))
    lengths = p["text"].map(lambda t: len(tok(t, add_special_tokens=False)["input_ids"]))
    assert lengths.between(10, 14).all()  # re-tokenising decoded text may merge or split a token at the joins
    assert (p["text"].map(n_words) < texts.map(n_words).min()).all()
    with pytest.raises(ValueError, match="needs tokenizer"):
        pool("dolma3_arxiv", **spec, max_tokens=12)


def test_olympiad_math_prefix_rule_and_random_partition():
    src = str(FIX / "olympiads_ref.jsonl")
    p = pool("olympiad_math", source=src)
    assert p["label"].sum() == 2
    raw = pd.read_json(src, lines=True)
    words = raw.loc[1, "solution"].split()
    k = math.floor(0.25 * len(words))
    row = p[p["prefix"].str.startswith(raw.loc[1, "problem"])].iloc[0]
    assert row["prefix"] == raw.loc[1, "problem"] + "\n\n" + " ".join(words[:k])
    assert row["suffix"] == " ".join(words[k:]) and row["text"] == row["prefix"] + " " + row["suffix"]
    again = pool("olympiad_math", source=src)
    assert again[["id", "label"]].equals(p[["id", "label"]])
    labelings = {tuple(pool("olympiad_math", source=src, membership={"rule": "random", "fraction": 0.5, "seed": s})
                       .sort_values("id")["label"]) for s in range(6)}
    assert len(labelings) > 1


def test_tulu3_single_turn_sources_and_length_cap():
    spec = dict(source=str(FIX / "tulu3_mix.jsonl"), subset="wildchat",
                nonmember_source=str(FIX / "tulu3_wildchat_unused.jsonl"))
    p = pool("tulu3", **spec)
    # members: wc-1, wc-2, wc-4 (wc-3 is multi-turn, aya/flan rows are other sources);
    # non-members: wu-1, wu-2 (wu-3 opens with a system turn)
    assert p["label"].value_counts().to_dict() == {1: 3, 0: 2}
    user, reply = "How do I boil an egg so the yolk stays soft?", ("Bring water to a boil, lower the egg in gently, "
                                                                   "cook it for six minutes, then move it straight "
                                                                   "into cold water so the yolk stays soft and runny.")
    k = math.floor(0.25 * n_words(reply))
    row = p[p["prefix"].str.startswith(user)].iloc[0]
    assert row["prefix"] == user + "\n\n" + " ".join(reply.split()[:k])
    assert row["suffix"] == " ".join(reply.split()[k:])
    capped = pool("tulu3", **spec, max_turn_tokens=30)  # wc-4's request has 38 words
    assert capped["label"].value_counts().to_dict() == {1: 2, 0: 2}
    with pytest.raises(KeyError, match="subset"):
        get_family("tulu3")({"source": spec["source"], "nonmember_source": spec["nonmember_source"]})


def test_tulu3_counts_tokens_with_a_tokenizer(tmp_path):
    from mialab.lm.tiny import train_tokenizer

    texts = pd.read_json(FIX / "bookmia.jsonl", lines=True)["snippet"].tolist()
    train_tokenizer(texts, vocab_size=280).save_pretrained(tmp_path)
    spec = dict(source=str(FIX / "tulu3_mix.jsonl"), subset="wildchat",
                nonmember_source=str(FIX / "tulu3_wildchat_unused.jsonl"), max_turn_tokens=110)
    by_words = pool("tulu3", **spec)
    by_tokens = pool("tulu3", **spec, tokenizer=str(tmp_path))  # a tiny BPE splits words into several tokens
    assert len(by_words) == 5  # every turn has at most 37 words
    assert by_tokens["label"].value_counts().to_dict() == {1: 1, 0: 2}  # 105 tokens kept, 112 and 189 not


@pytest.mark.parametrize("family,member_word", [("s1", "product"), ("s1_1", "Hmm")])
def test_s1_pairs_share_the_problem_prefix(family, member_word):
    p = pool(family, source=str(FIX / "s1k_1_1.jsonl"), target="trace_and_attempt")
    assert len(p) == 6 and p["pair_id"].nunique() == 3
    for _, pair in p.groupby("pair_id"):
        assert pair["prefix"].nunique() == 1 and pair["suffix"].nunique() == 2
    row = p[p["prefix"] == "A rectangle has sides $3$ and $4$. What is its area?"]
    member = row[row["label"] == 1].iloc[0]
    assert member_word in member["suffix"] and member["text"] == member["prefix"] + "\n\n" + member["suffix"]
    raw = pd.read_json(FIX / "s1k_1_1.jsonl", lines=True).iloc[1]
    teacher = "gemini" if family == "s1" else "deepseek"
    expected = raw[f"{teacher}_thinking_trajectory"] + " " + raw[f"{teacher}_attempt"]
    assert member["suffix"] == " ".join(expected.split())
    trace = pool(family, source=str(FIX / "s1k_1_1.jsonl"), target="trace")
    assert not trace["suffix"].str.contains("boxed").any()


@pytest.mark.parametrize("family", ["s1", "s1_1"])
def test_s1_target_is_the_attempt_only_by_default_as_the_code(family):
    # The released code reconstructs deepseek_attempt / gemini_attempt, not the thinking trace.
    raw = pd.read_json(FIX / "s1k_1_1.jsonl", lines=True)
    p = pool(family, source=str(FIX / "s1k_1_1.jsonl"))
    teacher = "gemini" if family == "s1" else "deepseek"
    members = p[p["label"] == 1].set_index("prefix")["suffix"]
    for _, r in raw.iterrows():
        assert members[r["question"].strip()] == " ".join(r[f"{teacher}_attempt"].split())
    with pytest.raises(Exception, match="everything"):  # the schema names the bad value
        pool(family, source=str(FIX / "s1k_1_1.jsonl"), target="everything")


@pytest.mark.parametrize("family,spec", [
    ("bookmia", {}), ("booktection", {}), ("arxivtection", {}), ("wikimia_24_hard", {}), ("olympiad_math", {}),
    ("s1", {}), ("s1_1", {}), ("dolma3_arxiv", {"nonmember_source": "SELF"}),
    ("tulu3", {"subset": "aya", "nonmember_source": "SELF"}), ("lara_rl", {"nonmember_source": "SELF"}),
])
def test_missing_column_names_source_and_column(tmp_path, family, spec):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"unrelated": "a row"}) + "\n")
    spec = {k: (str(bad) if v == "SELF" else v) for k, v in spec.items()}
    with pytest.raises(ValueError, match=r"bad\.jsonl: missing column"):
        get_family(family)({"source": str(bad), **spec})


def test_mimir_missing_column(tmp_path):
    for folder in ("members", "non-members"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "wiki.jsonl").write_text(json.dumps({"content": "x y"}) + "\n")
    with pytest.raises(ValueError, match=r"wiki\.jsonl: missing column\(s\) \['text'\]"):
        get_family("mimir")({"source": str(tmp_path), "domain": "wiki"})


# --- per-seed sampling -----------------------------------------------------------------------

@needs_data
def test_sampling_balanced_disjoint_and_order_free(arxiv_pool):
    a, b = sample_split(arxiv_pool, 64, seed=0), sample_split(arxiv_pool, 64, seed=1)
    assert a["label"].value_counts().to_dict() == {1: 64, 0: 64}
    assert not set(a["id"]) & set(b["id"])  # blocks 0 and 1 of the per-class permutation
    shuffled = arxiv_pool.sample(frac=1.0, random_state=7)
    assert sample_split(shuffled, 64, seed=0).equals(a)
    late = sample_split(arxiv_pool, 64, seed=50)  # block 50 runs past 762 members: fresh sample
    assert late["label"].value_counts().to_dict() == {1: 64, 0: 64}
    assert late.equals(sample_split(arxiv_pool, 64, seed=50))


@needs_data
def test_sampling_same_seed_same_parquet_bytes(arxiv_pool, tmp_path):
    write_parquet(sample_split(arxiv_pool, 32, seed=3), tmp_path / "a.parquet")
    write_parquet(sample_split(arxiv_pool.iloc[::-1], 32, seed=3), tmp_path / "b.parquet")
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


@needs_data
def test_sampling_too_few_rows_fails_or_caps():
    p = pool("mimir", source=MIMIR, domain="dm")  # 89 non-members
    with pytest.raises(ValueError, match="asked for 100 per class"):
        sample_split(p, 100, seed=0)
    capped = sample_split(p, 100, seed=0, cap_to_min_class=True)
    assert capped["label"].value_counts().to_dict() == {1: 89, 0: 89}


def test_sampling_keeps_pairs_together():
    p = pool("s1", source=str(FIX / "s1k_1_1.jsonl"))
    for seed in range(3):
        split = sample_split(p, 2, seed=seed)
        assert len(split) == 4 and split["pair_id"].nunique() == 2
        assert (split.groupby("pair_id")["label"].sum() == 1).all()
    assert not set(sample_split(p, 1, seed=0)["pair_id"]) & set(sample_split(p, 1, seed=1)["pair_id"])
    with pytest.raises(ValueError, match="not one member"):
        sample_split(p[p["label"] == 1].assign(label=[1, 0, 1]), 1, seed=0)


def test_request_response_ratio_zero_prefix_is_the_request_alone():
    # The code's post-training candidates: the whole answer is the suffix (its assistant prefix comes later).
    src = str(FIX / "olympiads_ref.jsonl")
    raw = pd.read_json(src, lines=True)
    p = pool("olympiad_math", source=src, solution_prefix_ratio=0.0).set_index("prefix")
    for _, r in raw.iterrows():
        assert p.loc[r["problem"].strip(), "suffix"] == " ".join(r["solution"].split())


def test_the_exact_repeats_a_family_drops_are_counted_for_the_pools_manifest(tmp_path):
    """``build_pool`` returns, beside the pool, how many exact repeats its family dropped (each candidate kept
    once), whichever family drops them: what rule build_pool writes into the pool's manifest."""
    from mialab.data.registry import build_pool

    src = tmp_path / "w.parquet"
    pd.DataFrame({"input": ["a b c d", "e f g h", "a b c d", "i j k l", "a b c d", "e f g h"],
                  "label": [1, 0, 1, 0, 1, 0]}).to_parquet(src)
    wikimia, dropped = build_pool({"family": "wikimia", "source": str(src)})
    assert (dropped, len(wikimia)) == (3, 3)
    once = get_family("aime")({"source": AIME_TRAIN})
    twice, dropped = build_pool({"family": "aime", "source": [AIME_TRAIN, AIME_TRAIN]})
    assert dropped == len(once) and twice["id"].tolist() == once["id"].tolist()
    rows = [json.loads(x) for x in (FIX / "wikimia_24_hard.jsonl").read_text().splitlines()]
    (tmp_path / "h.jsonl").write_text("\n".join(json.dumps(r) for r in rows + rows[:2]) + "\n")
    assert build_pool({"family": "wikimia_24_hard", "source": str(tmp_path / "h.jsonl")})[1] == 2
    assert build_pool({"family": "wikimia", "source": "resources/data/wikimia/WikiMIA_length64.parquet"})[1] == 0


# --- the authors' released tables (their columns, in the CPU rehearsal's samples) ----------------------------

RELEASED = ROOT / "resources" / "rehearsal" / "data"


def test_the_released_tables_build_their_pools(tmp_path):
    """ADRA-RL/AIME-2021-2025-Cleaned: each year read from the problem's AoPS url; ADRA-RL/Dolma3-Arxiv-MIA-1k and
    LaRA's benchmark files: members and non-members in one table, by its label column, LaRA's question the last chat
    turn (plus AIME 2025 as further non-members, columns named otherwise); ADRA-RL's processed Aya members: every
    row a member."""
    aime = pool("aime", source=str(RELEASED / "adra_aime_cleaned.jsonl"), solution_prefix_ratio=0.0)
    assert aime.groupby("label")["group"].agg(lambda g: sorted(set(g))).to_dict() == {
        0: ["2025"], 1: ["2021", "2022", "2023", "2024"]}
    assert aime["id"].str.fullmatch(r"aime-202[1-5]-[12]-[1-5]").all() and aime["id"].is_unique
    pd.DataFrame([{"problem": "p", "solution": "s", "url": "https://example.org/x"}]).to_json(
        tmp_path / "u.jsonl", orient="records", lines=True)
    with pytest.raises(ValueError, match=r"column 'url', row 0: 'https://example.org/x' is not an AoPS AIME problem"):
        get_family("aime")({"source": str(tmp_path / "u.jsonl")})
    dolma = pool("dolma3_arxiv", source=str(RELEASED / "adra_dolma3_arxiv_mia.jsonl"))
    assert dolma["label"].value_counts().to_dict() == {1: 24, 0: 24}
    lara = pool("lara_rl", source=str(RELEASED / "lara_olmo_benchmark.jsonl"), label_column="member",
                problem_column="prompt[-1].content", nonmember_source=str(RELEASED / "lara_aime25.jsonl"),
                nonmember_columns={"problem": "problem"}, model="olmo")
    assert lara.groupby(["label", "group"]).size().to_dict() == {(0, "heldout"): 24, (1, "olmo"): 12}  # AIME 2026 once
    assert lara.loc[lara["group"] == "olmo", "text"].str.endswith("\\boxed{Your answer}").all()
    # the benchmark's answer-format line is its prompts', not the problem's: removed from its rows, so the added
    # AIME 2025 non-members (without it) read alike and the templates give all of them the line back
    line = "\n\nPresent the answer in LaTex format: \\boxed{Your answer}"
    bare = pool("lara_rl", source=str(RELEASED / "lara_olmo_benchmark.jsonl"), label_column="member",
                problem_column="prompt[-1].content", instruction_suffix=line,
                nonmember_source=str(RELEASED / "lara_aime25.jsonl"), nonmember_columns={"problem": "problem"},
                model="olmo")
    assert not bare["text"].str.contains("Present the answer").any() and len(bare) == len(lara)
    assert set(bare.loc[bare["group"] == "olmo", "text"]) == {t.removesuffix(" " + " ".join(line.split()))
                                                           for t in lara.loc[lara["group"] == "olmo", "text"]}
    with pytest.raises(ValueError, match=r"lara_aime25.jsonl: row 0 \(\d+ row\(s\) in all\) does not end with "
                                         r"instruction_suffix"):
        pool("lara_rl", source=str(RELEASED / "lara_aime25.jsonl"), instruction_suffix=line,
             nonmember_source=str(RELEASED / "lara_aime25.jsonl"), model="x")
    with pytest.raises(ValueError, match="lara_rl: name the non-members"):
        get_family("lara_rl")({"source": str(RELEASED / "lara_aime25.jsonl")})
    aya = pool("tulu3", subset="aya", source=str(RELEASED / "adra_tulu_aya.jsonl"), member_sources=[],
               nonmember_source=str(RELEASED / "adra_aya_nonmembers.jsonl"), response_prefix_ratio=0.0)
    assert aya["label"].value_counts().to_dict() == {1: 40, 0: 40}

