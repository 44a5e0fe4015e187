"""Every bad input names its fault before work (issue #32): one table of bad inputs, each with where it
must fail and a fragment of the message that names the fault (the key path, file or column).

Where a case fails:

- ``plan``: the plan-time checks of ``rules/common.smk``, run in-process in its order (:func:`plan_checks`),
  on the default config (or the ADRA overlay) changed by the case: before any job, in a dry run too;
- ``start``: the checks ``rules/common.smk`` runs when a local run starts (``onstart``, not in a dry run): the
  devices a job here sees (none: this is a CPU machine) and the hub models its offline jobs read;
- ``rule``: the rule's own code path on a bad file (the family a ``build_pool`` job calls, ``build_split``'s
  draw, a corpus read, the checkpoint loader), which fails before it writes anything;
- ``file``: the checks of the config files Snakemake read (YAML, overlays).

The wiring is tested once for each kind through the Snakefile itself (:func:`test_the_snakefile_runs_the_checks`,
and :func:`test_failing_jobs_leave_no_output` runs failing rules in one Snakemake run: no output, no
temporary file). Case ids: ``issue-`` the bad inputs listed in issue #32, ``was-`` cases of the earlier
tests, ``new-`` further ones.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import yaml
from safetensors.numpy import save_file
from workflow_helpers import REPO, default_config, make_workdir, merged_config, snakemake

from mialab.adra.plan import ADRAPlan
from mialab.calibdcd.plan import CalibDCDPlan
from mialab.data.corpus import read_corpus
from mialab.data.mixing import check_filler
from mialab.data.registry import config_schema, get_family, known_families
from mialab.data.sampling import sample_split
from mialab.data.schema import validate_split
from mialab.data.sources import read_table
from mialab.lara.plan import LaRAPlan
from mialab.n_sampling.plan import NSamplingPlan
from mialab.pipeline.cluster_checks import check_cluster_arithmetic, check_devices
from mialab.pipeline.columns import check_columns, check_targets
from mialab.pipeline.config import (
    ConfigError,
    check_config,
    check_config_files,
    check_pool_keys,
    check_yaml_files,
    load_yaml,
    validate_config,
)
from mialab.pipeline.plan import Plan
from mialab.pipeline.prefetch import check_hub_cache
from mialab.pipeline.sizing import Sizing
from mialab.scoring.baselines import check_methods, passive_columns
from mialab.training.checkpoints import CheckpointRefused, latest_checkpoint, refusing_pickled_code
from mialab.training.plan import RLPlan

WIKIMIA = REPO / "resources/data/wikimia/WikiMIA_length64.parquet"
AIME = REPO / "resources/data/aime/aime_1983_2023.json"


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch, tmp_path):
    """Config paths are relative to the working directory, as under Snakemake; the hub is offline and its
    cache an empty folder (a start case plants what it needs)."""
    from huggingface_hub import constants

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))


# -- the checks, as rules/common.smk runs them --------------------------------------------------------
def plan_checks(cfg: dict) -> None:
    """rules/common.smk's plan-time checks on ``cfg``, in its order: the schema and finite numbers, the
    cross-references, the cluster arithmetic (a local run without GPUs), every method's plan, the columns
    the evaluation names, the leakage checks' options (its LEAKAGE_TABLES)."""
    validate_config(cfg)
    check_config(cfg)
    check_methods(cfg["scoring"]["methods"], cfg["scoring"])
    check_cluster_arithmetic(cfg, local_gpus=0, job_gpus=Sizing(cfg).gpus)
    plan = Plan(cfg)
    ns = NSamplingPlan(plan, cfg)
    adra = ADRAPlan(ns, cfg)
    RLPlan(plan)
    lara, calibdcd = LaRAPlan(plan, cfg), CalibDCDPlan(plan, cfg)
    columns = [*passive_columns(plan), *ns.columns(), *adra.columns(), *lara.columns(), *calibdcd.columns()]
    check_columns(cfg["evaluation"], columns)
    check_targets(cfg["paper_targets"], columns)
    for d in cfg["datasets"]:
        for s in plan.seeds():
            plan.leakage(d, s)


def start_checks(cfg: dict) -> None:
    """rules/common.smk's ``onstart`` checks of a local run on this (GPU-less) machine, after the plan's."""
    plan_checks(cfg)
    check_devices(cfg, 0)
    check_hub_cache(cfg, {}, None, [])


@cache
def _base(name: str) -> dict:
    if name == "adra":  # the ADRA / ADRA+ overlay
        return merged_config("config.yaml", "configs/tiny_adra.yaml")
    return default_config()


# -- bad files ---------------------------------------------------------------------------------------
def wikimia_rows(n: int = 12) -> pd.DataFrame:
    return pd.read_parquet(WIKIMIA).head(n).reset_index(drop=True)


def write(path: Path, df: pd.DataFrame) -> Path:
    """``df`` as ``path``'s format (parquet, jsonl, csv)."""
    if path.suffix == ".parquet":
        df.to_parquet(path)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in df.to_dict("records")))
    else:
        df.to_csv(path, index=False)
    return path


def build_pool(source, family: str = "wikimia", **pool) -> pd.DataFrame:
    """Rule build_pool's code path (workflow_scripts/build_pool.py) on dataset ``d``."""
    spec = {"family": family, "source": str(source), "membership": {"rule": "label"}, **pool}
    return validate_split(get_family(family)(spec), name=f"dataset 'd' pool ({spec['source']})")


def truncated(src: Path, dest: Path, cut: int) -> Path:
    dest.write_bytes(src.read_bytes()[:-cut])
    return dest


def model_folder(root: Path, *, vocab: int = 16) -> Path:
    """A model folder as from_pretrained reads it: config, tokenizer, safetensors weights."""
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": vocab}))
    (root / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {f"t{i}": i for i in range(8)}},
                                                     "added_tokens": [{"id": 8, "content": "<s>"}]}))
    (root / "tokenizer_config.json").write_text("{}")
    save_file({"w": np.zeros(4, dtype=np.float32)}, str(root / "model.safetensors"))
    return root


def hf_model(folder_change: Callable[[Path], None]):
    """A config change: a local ``kind: hf`` model whose folder ``folder_change`` damages."""
    def change(cfg: dict, tmp: Path) -> None:
        folder = model_folder(tmp / "m")
        folder_change(folder)
        cfg["models"]["ext"] = {"kind": "hf", "path": str(folder), "datasets": []}
    return change


def cache_hub_model(tmp: Path, repo: str, revision: str = "main") -> None:
    """Plant ``repo``'s config.json at ``revision`` (a branch name or a commit) in the (test's) hub cache."""
    commit = "a" * 40 if revision == "main" else revision
    root = tmp / "hub-cache" / f"models--{repo.replace('/', '--')}"
    (root / "snapshots" / commit).mkdir(parents=True)
    (root / "snapshots" / commit / "config.json").write_text("{}")
    if revision == "main":
        (root / "refs").mkdir()
        (root / "refs" / "main").write_text(commit)


def tampered_checkpoint(tmp: Path) -> Path:
    """An SFT checkpoint folder whose DeepSpeed state is a pickle that runs a command when unpickled
    (``marker`` appears if it ever does)."""
    folder = tmp / "checkpoints" / "step-00000004"
    folder.mkdir(parents=True)

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {tmp / 'marker'}",)

    (folder / "mp_rank_00_model_states.pt").write_bytes(pickle.dumps({"module": Payload()}, protocol=2))
    return folder


def resume_sft(folder: Path) -> None:
    """The SFT job's resume (mialab.training.sft.run_sft): DeepSpeed's checkpoint loader as the job sets it."""
    from mialab.training.sft import refuse_pickled_code

    engine = SimpleNamespace(checkpoint_engine=SimpleNamespace())
    refuse_pickled_code(engine)
    with refusing_pickled_code(folder):
        engine.checkpoint_engine.load(str(folder / "mp_rank_00_model_states.pt"))


def resume_other_jobs_checkpoint(folder: Path) -> None:
    """GRPO resuming from the previous epoch's checkpoint, another job's output (mialab.training.grpo.run_grpo)."""
    import torch

    with refusing_pickled_code(folder, move_aside=False):
        torch.load(folder / "mp_rank_00_model_states.pt", weights_only=True)


def offline_hub_dataset(tmp: Path) -> None:
    """read_table of a hub dataset the offline hub cache does not hold (the suite runs with HF_HUB_OFFLINE=1)."""
    read_table({"hub": "org/data", "split": "train", "revision": "0" * 40})


def pool_frame(n: int, labels=(1, 0)) -> pd.DataFrame:
    return pd.DataFrame({"id": [f"i{i}" for i in range(n)], "text": ["t"] * n, "prefix": ["t"] * n, "suffix": ["t"] * n,
                         "label": [labels[i % len(labels)] for i in range(n)], "source": ["s"] * n})


def binary(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def yaml_file(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


# -- the table ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bad:
    """One bad input: ``where`` it must fail (module doc), the regular expression ``expect`` its message
    must match, and the input: ``change`` edits a copy of the ``base`` config (``default`` or ``adra``) and
    may write files into the test's folder; ``run`` calls a rule's code path (or a file check) on bad
    files it writes there."""

    where: str
    expect: str
    change: Callable[[dict, Path], None] | None = None
    run: Callable[[Path], None] | None = None
    base: str = "default"


def at(*path, value=None, append=None, drop: bool = False):
    """A config change setting (``value``), appending to (``append``) or deleting (``drop``) the key at ``path``."""
    def change(cfg: dict, tmp: Path) -> None:
        node = cfg
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(node, dict) else node[key]
        if drop:
            del node[path[-1]]
        elif append is not None:
            node[path[-1]].append(append)
        else:
            node[path[-1]] = copy.deepcopy(value)
    return change


def both(*changes):
    def change(cfg: dict, tmp: Path) -> None:
        for c in changes:
            c(cfg, tmp)
    return change


NAN, INF = float("nan"), float("inf")
# a paper figure the default config computes (paper_targets; mialab.pipeline.columns.check_targets)
TARGET = {"method": "min_k_plus_plus@0.2", "dataset": "wikimia", "model": "base", "metric": "auroc", "value": 95.5,
          "source": {"paper": "P", "table": "Table 2", "row": "Min-K%++, WikiMIA"}}
SFT_WHERE = ("models", "sft", "filler", "where", 0)
CASES = {
    # ---- issue #32: silent ----
    "issue-k-drops-the-baseline": Bad(
        "plan", r"evaluation\.baseline: 'min_k_plus_plus@0\.2' is not among the columns "
                r"min_k_plus_plus writes .*: min_k_plus_plus@0\.1",
        at("scoring", "k", value=[0.1])),
    "issue-k-drops-a-headline-row": Bad(
        "plan", r"evaluation\.headline\.Min-K%\+\+: 'min_k_plus_plus@0\.2' is not among",
        both(at("scoring", "k", value=[0.1]), at("evaluation", "baseline", value="loss"))),
    "issue-k-drops-the-adra-plus-prior": Bad(
        "plan", r"adra\.contrastive\.baseline: 'min_k_plus_plus@0\.2' is not a score "
                r"of scoring\.methods .* on sft \(.*min_k_plus_plus@0\.1[,)]",
        at("scoring", "k", value=[0.1]),
        base="adra"),
    "issue-baseline-k-not-scored": Bad(
        "plan", r"evaluation\.baseline: 'min_k_plus_plus@0\.3' is not among the columns",
        at("evaluation", "baseline", value="min_k_plus_plus@0.3")),
    "issue-headline-column-of-no-method": Bad(
        "plan", r"evaluation\.headline\.Zlib: 'zlb' is not a score column of "
                r"any method.*zlib: zlib",
        at("evaluation", "headline", value={"Zlib": "zlb"})),
    "issue-nan-label": Bad(
        "rule", r"nan\.parquet: column 'label', row 3: missing is not a membership label",
        run=lambda t: build_pool(write(t / "nan.parquet", wikimia_rows().astype({"label": float}).pipe(
            lambda d: d.assign(label=d["label"].where(d.index != 3)))))),
    # ---- issue #32: raw library tracebacks ----
    "issue-lr-nan": Bad(
        "plan", r"models\.sft\.train\.lr: nan is not a finite number",
        at("models", "sft", "train", "lr", value=NAN)),
    "issue-device-cuda-7-on-a-cpu": Bad(
        "start", r"scoring\.device: 'cuda:7', but a job here sees 0 GPU\(s\); use auto",
        at("scoring", "device", value="cuda:7")),
    "issue-truncated-parquet": Bad(
        "rule", r"cut\.parquet: not a readable parquet file .*magic bytes.*truncated or damaged",
        run=lambda t: build_pool(truncated(WIKIMIA, t / "cut.parquet", 100))),
    "issue-labels-yes-no": Bad(
        "rule", r"yes\.csv: column 'label', row 0: str 'no' is not a membership label; labels "
                r"are 1 \(member\) or 0 \(non-member\)",
        run=lambda t: build_pool(write(t / "yes.csv", wikimia_rows().assign(
            label=lambda d: np.where(d["label"] == 1, "yes", "no"))))),
    "issue-model-without-weights": Bad(
        "plan", r"models\.ext\.path: .*/m holds no weights; mialab loads \*\.safetensors weights only",
        hf_model(lambda f: (f / "model.safetensors").unlink())),
    "issue-model-with-only-pytorch-model-bin": Bad(
        "plan", r"models\.ext\.path: .*/m holds only pickled weights "
                r"\(pytorch_model\.bin\), which mialab never loads",
        hf_model(lambda f: os.replace(f / "model.safetensors",
                                      f / "pytorch_model.bin"))),
    "issue-hub-model-offline-never-fetched": Bad(
        "start", r"models\.ext\.path: org/never-fetched \(revision unpinned.*\n"
                 r"fetch them .* prefetch",
        at("models", "ext", value={"kind": "hf", "path": "org/never-fetched",
                                   "datasets": []})),
    "issue-invalid-tokenizer-config": Bad(
        "plan", r"models\.ext\.path: .*tokenizer_config\.json is not valid JSON",
        hf_model(lambda f: (f / "tokenizer_config.json").write_text('{"model_max'))),
    "issue-tampered-checkpoint": Bad(
        "rule", r"step-00000004: refused to resume from this checkpoint: .*pickled objects "
                r".*moved to .*step-00000004\.refused.*a retry of the job starts without it",
        run=lambda t: resume_sft(tampered_checkpoint(t))),
    # ---- issue #32: unclear ----
    "issue-sft-lr-inf": Bad(
        "plan", r"models\.sft\.train\.lr: inf is not a finite number",
        at("models", "sft", "train", "lr", value=INF)),
    "issue-where-op-not-allowed": Bad(
        "plan", r"^models\.sft\.filler\.where\[0\]\.op: '=~' is not one of \['==', '!=', '<'",
        at(*SFT_WHERE, "op", value="=~")),
    "issue-truncated-jsonl": Bad(
        "rule", r"cut\.jsonl: line 12 is not a JSON value .*a truncated or damaged line of a "
                r"JSON-lines file",
        run=lambda t: build_pool(truncated(write(t / "all.jsonl", wikimia_rows()), t / "cut.jsonl", 30))),
    # ---- earlier tests (tests/test_input_errors.py, tests/test_bad_input.py) ----
    **{f"was-unknown-pool-key-{key}": Bad(
        "plan", rf"datasets\.wikimia\.pool\.{key}: not a key of family 'wikimia'; it accepts: .*prefix_ratio.*"
                r"membership",
        at("datasets", "wikimia", "pool", key, value=1))
       for key in ("prefix_ration", "max_word", "membrship")},
    **{f"was-membership-in-family-{family}": Bad(
        "plan", rf"datasets\.wikimia\.pool\.membership: not a key of family '{family}'",
        at("datasets", "wikimia", "pool", value={"family": family, "source": "resources/data/wikimia",
                                                 "membership": {"rule": "label"}, **required}))
       for family, required in (("mimir", {"domain": "arxiv"}), ("wikimia_24_hard", {}), ("s1", {}), ("s1_1", {}),
                                *((f, {"nonmember_source": "resources/data/wikimia"})
                                  for f in ("dolma3_arxiv", "tulu3", "lara_rl")))},
    "was-missing-local-path": Bad(
        "plan", r"datasets\.wikimia\.pool\.source: 'resources/data/wikimia_typo' does not exist "
                r".*\{hub: org/name\}",
        at("datasets", "wikimia", "pool", "source", value="resources/data/wikimia_typo")),
    "was-hub-dataset-id-malformed": Bad(
        "plan", r"datasets\.wikimia\.pool\.source\.hub: 'not a hub id' does not match",
        at("datasets", "wikimia", "pool", "source", value={"hub": "not a hub id"})),
    "new-file-source-without-its-hash": Bad(
        "plan", r"datasets\.wikimia\.pool\.source: \{'url': .* is none of the forms it accepts .*\{url, sha256\}",
        at("datasets", "wikimia", "pool", "source", value={"url": "https://example.org/wikimia.parquet"})),
    "new-github-source-at-a-branch": Bad(
        "plan", r"datasets\.wikimia\.pool\.source\.commit: 'main' does not match '\^\[0-9a-f\]\{40\}\$'",
        at("datasets", "wikimia", "pool", "source", value={"github": "org/data", "commit": "main",
                                                            "path": "wikimia.parquet", "sha256": "0" * 64})),
    "was-missing-filler": Bad(
        "plan", r"models\.base\.filler: .*nope\.txt' does not exist",
        at("models", "base", "filler", value="resources/data/tinyshakespeare/nope.txt")),
    **{f"was-model-path-neither-folder-nor-hub-id-{i}": Bad(
        "plan", rf"models\.ext\.path: '{path}' is not an existing model folder, nor a hub model id \(org/name\)",
        at("models", "ext", value={"kind": "hf", "path": path, "datasets": []}))
       for i, path in enumerate(["checkpoints/run1/final", "./my_model", "gpt-2"])},
    "was-truncated-safetensors": Bad(
        "plan", r"models\.ext\.path: .*model\.safetensors: .*truncated",
        hf_model(lambda f: truncated(f / "model.safetensors", f / "model.safetensors", 6))),
    "was-truncated-config-json": Bad(
        "plan", r"models\.ext\.path: .*config\.json is not valid JSON .*truncated",
        hf_model(lambda f: truncated(f / "config.json", f / "config.json", 6))),
    "was-misspelt-lm-reference": Bad(
        "plan", r"calibdcd\.detectors\.dpdllm\.reference_model: 'bsae' is not a configured "
                r"model \(.*base.*\)",
        at("calibdcd", "detectors", "dpdllm", "reference_model", value="bsae")),
    "was-uncached-hub-dataset-offline": Bad(
        "rule", r"hub dataset org/data \(split train, revision 0{40}\): not in the local hub cache, and HF_HUB_OFFLINE "
                r"is set.*snakemake prefetch <your --profile and --configfile arguments>",
        run=offline_hub_dataset),
    "was-null-text": Bad(
        "rule", r"w\.jsonl: column 'input', row 1: missing instead of text",
        run=lambda t: build_pool(yaml_file(t, "w.jsonl", '{"input": "a b c d", "label": 1}\n'
                                                    '{"input": null, "label": 0}\n'))),
    "was-non-utf8": Bad(
        "rule", r"w\.json: not UTF-8 text: byte offset 15 \(line 1\)",
        run=lambda t: build_pool(binary(t / "w.json", b'[{"input": "caf\xe9 au lait", "label": 1}]'))),
    "was-pretty-printed-json-object": Bad(
        "rule", r"w\.json: line 1 .*a JSON object spread over several lines; accepted "
                r"formats: parquet, csv",
        run=lambda t: build_pool(yaml_file(t, "w.json", json.dumps({"input": ["a b"], "label": [1]}, indent=2)))),
    "was-non-integer-year": Bad(
        "rule", r"a\.jsonl: column 'year', row 1: 'twenty' is not a year",
        run=lambda t: build_pool(write(t / "a.jsonl", pd.DataFrame(
            {"problem": ["p1", "p2"], "solution": ["s one two", "s"], "year": [2024, "twenty"]})),
            family="aime", membership={"rule": "random"})),
    "was-missing-column": Bad(
        "rule", r"bad\.parquet: missing column\(s\) \['input'\]",
        run=lambda t: build_pool(write(t / "bad.parquet", pd.DataFrame({"text": ["a b c d"] * 4,
                                                                         "label": [1, 0, 1, 0]})))),
    "was-split-larger-than-pool": Bad(
        "rule", r"^dataset 'd': asked for 400 per class but the pool has \{[^}]*\}; lower "
                r"datasets\.d\.split\.n_per_class to at most \d+$",
        run=lambda t: sample_split(build_pool(WIKIMIA), 400, 0, name="dataset 'd'",
                                   n_key="datasets.d.split.n_per_class")),
    "was-split-larger-than-small-pool": Bad(
        "rule", r"^dataset 'wiki': asked for 5 per class but the pool has \{[^}]*\}; "
                r"lower datasets\.wiki\.split\.n_per_class to at most 3$",
        run=lambda t: sample_split(pool_frame(6), 5, 0, name="dataset 'wiki'",
                                   n_key="datasets.wiki.split.n_per_class")),
    "was-filler-without-text": Bad(
        "rule", r"models\.base\.filler: the filler holds no text",
        run=lambda t: check_filler("base", [], ["a member text"])),
    "was-duplicate-yaml-key": Bad(
        "file", r"c\.yaml:5: key 'split' given twice .*first at line 4",
        run=lambda t: load_yaml(yaml_file(t, "c.yaml", "seeds: [0]\ndatasets:\n  a:\n    split: "
                                                   "{n_per_class: 4}\n    split: {n_per_class: 8}\n"))),
    "was-yaml-syntax-error": Bad(
        "file", r"c\.yaml:\d+:\d+: YAML syntax error",
        run=lambda t: load_yaml(yaml_file(t, "c.yaml", "seeds: [0]\ndatasets:\n  a: {pool: [\n"))),
    # ---- further bad inputs: shapes, types and sizes at depth ----
    "new-seeds-empty": Bad(
        "plan", r"^seeds: \[\] should be non-empty",
        at("seeds", value=[])),
    "new-seeds-duplicated": Bad(
        "plan", r"^seeds: \[0, 0\] has non-unique elements",
        at("seeds", value=[0, 0])),
    "new-seed-negative": Bad(
        "plan", r"^seeds\[1\]: -1 is less than the minimum of 0",
        at("seeds", value=[0, -1])),
    "new-seeds-a-string": Bad(
        "plan", r"^seeds: '0' is not of type 'array'",
        at("seeds", value="0")),
    "new-split-size-zero": Bad(
        "plan", r"datasets\.wikimia\.split\.n_per_class: 0 is less than the minimum of 1",
        at("datasets", "wikimia", "split", "n_per_class", value=0)),
    "new-split-size-negative": Bad(
        "plan", r"datasets\.aime\.split\.n_per_class: -5 is less than the minimum",
        at("datasets", "aime", "split", "n_per_class", value=-5)),
    "was-split-size-a-string": Bad(
        "plan", r"datasets\.wikimia\.split\.n_per_class: 'sixty-four' is not of type 'integer'",
        at("datasets", "wikimia", "split", "n_per_class", value="sixty-four")),
    "was-unknown-scoring-key": Bad(
        "plan", r"^scoring\.maxlength: unknown key; scoring accepts: methods, k, max_length",
        at("scoring", "maxlength", value=8)),
    "was-unknown-family": Bad(
        "plan", r"datasets\.wikimia\.pool\.family: unknown family 'wikimai'; known: .*wikimia",
        at("datasets", "wikimia", "pool", "family", value="wikimai")),
    "was-reference-unknown-model": Bad(
        "plan", r"models\.sft\.reference: unknown model 'bse'",
        at("models", "sft", "reference", value="bse")),
    "new-k-empty": Bad(
        "plan", r"scoring\.k: \[\] should be non-empty",
        at("scoring", "k", value=[])),
    "new-k-duplicated": Bad(
        "plan", r"scoring\.k: \[0\.2, 0\.2\] has non-unique elements",
        at("scoring", "k", value=[0.2, 0.2])),
    "new-k-above-one": Bad(
        "plan", r"scoring\.k\[0\]: 1\.5 is greater than the maximum of 1",
        at("scoring", "k", value=[1.5])),
    "new-k-zero": Bad(
        "plan", r"scoring\.k\[0\]: 0 is less than or equal to the minimum of 0",
        at("scoring", "k", value=[0])),
    "new-method-duplicated": Bad(
        "plan", r"scoring\.methods: .* has non-unique elements",
        at("scoring", "methods", value=["loss", "loss", "min_k_plus_plus"])),
    "new-method-unknown": Bad(
        "plan", r"scoring\.methods: unknown scoring method\(s\) \['ppl'\]; known: dc_pdd, gradnorm, loss",
        at("scoring", "methods", value=["loss", "ppl"])),
    "new-dc-pdd-without-corpus": Bad(
        "plan", r"scoring\.dc_pdd\.corpus: DC-PDD needs a reference corpus",
        at("scoring", "dc_pdd", value={})),
    "new-neighbourhood-without-mlm-model": Bad(
        "plan", r"scoring\.neighbourhood\.mlm_model: the neighbourhood attack needs a fill-mask model",
        at("scoring", "neighbourhood", "mlm_model", drop=True)),      # the default world runs the attack
    "new-gradnorm-norm": Bad(
        "plan", r"scoring\.gradnorm\.p: 3 is not one of \[1, 2, 'inf'\]",
        at("scoring", "gradnorm", "p", value=3)),
    "new-methods-empty": Bad(
        "plan", r"scoring\.methods: \[\] should be non-empty",
        at("scoring", "methods", value=[])),
    "new-max-length-fractional": Bad(
        "plan", r"scoring\.max_length: 16\.5 is not of type 'integer'",
        at("scoring", "max_length", value=16.5)),
    "new-max-length-boolean": Bad(
        "plan", r"scoring\.max_length: True is not of type 'integer'",
        at("scoring", "max_length", value=True)),
    "new-generation-batch-size-zero": Bad(
        "plan", r"lara\.baselines\.batch_size: 0 is less than the minimum of 1",
        at("lara", "baselines", "batch_size", value=0)),
    "new-removed-batch-size": Bad(
        "plan", r"^scoring\.batch_size: unknown key; scoring accepts: methods, k, max_length",
        at("scoring", "batch_size", value=16)),
    "new-device-not-a-device": Bad(
        "plan", r"scoring\.device: 'gpu' does not match",
        at("scoring", "device", value="gpu")),
    "new-device-index-not-a-number": Bad(
        "plan", r"lara\.features\.device: 'cuda:x' does not match",
        at("lara", "features", "device", value="cuda:x")),
    "new-truncation-unknown": Bad(
        "plan", r"scoring\.truncation: 'cut' is not one of",
        at("scoring", "truncation", value="cut")),
    "new-max-length-one": Bad(
        "plan", r"scoring\.max_length: 1 is less than the minimum of 2",
        at("scoring", "max_length", value=1)),
    "new-fpr-targets-empty": Bad(
        "plan", r"evaluation\.fpr_targets: \[\] should be non-empty",
        at("evaluation", "fpr_targets", value=[])),
    "new-fpr-target-above-one": Bad(
        "plan", r"evaluation\.fpr_targets\[0\]: 1\.5 is greater than or equal to the maximum",
        at("evaluation", "fpr_targets", value=[1.5])),
    "new-fpr-targets-duplicated": Bad(
        "plan", r"evaluation\.fpr_targets: \[0\.05, 0\.05\] has non-unique elements",
        at("evaluation", "fpr_targets", value=[0.05, 0.05])),
    "new-fpr-target-nan": Bad(
        "plan", r"evaluation\.fpr_targets\[1\]: nan is not a finite number",
        at("evaluation", "fpr_targets", value=[0.01, NAN])),
    "new-headline-empty": Bad(
        "plan", r"evaluation\.headline: \{\} should be non-empty",
        at("evaluation", "headline", value={})),
    "new-headline-column-a-number": Bad(
        "plan", r"evaluation\.headline\.Loss: 3 is not of type 'string'",
        at("evaluation", "headline", value={"Loss": 3})),
    "new-bootstrap-resamples-too-few": Bad(
        "plan", r"evaluation\.bootstrap\.resamples: 10 is less than the minimum of 100",
        at("evaluation", "bootstrap", value={"resamples": 10})),
    "new-bootstrap-level-one": Bad(
        "plan", r"evaluation\.bootstrap\.level: 1\.0 is greater than or equal to the maximum",
        at("evaluation", "bootstrap", value={"level": 1.0})),
    "new-headline-n-sampling-metric-typo": Bad(
        "plan", r"evaluation\.headline\.NS: 'n_sampling/lcs@aon' is not among the "
                r"columns n_sampling writes under n_sampling\.metrics: .*lcs_ratio_ref@aon",
        at("evaluation", "headline", value={"NS": "n_sampling/lcs@aon"})),
    "new-headline-calibdcd-variant-not-run": Bad(
        "plan", r"evaluation\.headline\.CalibDCD: 'calibdcd/dpdllm/calibdcd' is not "
                r"among the columns calibdcd \(dpdllm\) writes .*calibdcd/dpdllm/top1",
        both(at("calibdcd", "variants", value=["top1"]),
             at("evaluation", "headline", value={"CalibDCD": "calibdcd/dpdllm/calibdcd"}))),
    "new-headline-calibdcd-detector-typo": Bad(
        "plan", r"evaluation\.headline\.CalibDCD: 'calibdcd/dpdlm/calibdcd' is not a "
                r"score column of any method",
        at("evaluation", "headline", value={"CalibDCD": "calibdcd/dpdlm/calibdcd"})),
    "new-headline-lara-under-in-set-reference": Bad(
        "plan", r"evaluation\.headline\.LaRA: 'lara' is not among the columns "
                r"lara writes",
        both(at("lara", "detection", value={"reference": "in_set"}),
             at("evaluation", "headline", value={"LaRA": "lara"}))),
    "new-headline-adra-plus-metric-typo": Bad(
        "plan", r"evaluation\.headline\.ADRA\+: 'adra_plus/lcs_ratio@aon' is not among "
                r"the columns adra_plus writes under adra\.variants.*adra_plus/lcs_ratio_ref@aon",
        at("evaluation", "headline", value={"ADRA+": "adra_plus/lcs_ratio@aon"}),
        base="adra"),
    "new-paper-target-column-not-written": Bad(
        "plan", r"paper_targets\[0\] \(min_k_plus_plus@0\.3 auroc on wikimia / base\): 'min_k_plus_plus@0\.3' is not "
                r"among the columns min_k_plus_plus writes .*: min_k_plus_plus@0\.2",
        at("paper_targets", value=[{**TARGET, "method": "min_k_plus_plus@0.3"}])),
    "new-paper-target-column-of-no-method": Bad(
        "plan", r"paper_targets\[1\] \(calibdcd/dpdlm/calibdcd auroc on wikimia / base\): 'calibdcd/dpdlm/calibdcd' "
                r"is not a score column of any method",
        at("paper_targets", value=[TARGET, {**TARGET, "method": "calibdcd/dpdlm/calibdcd"}])),
    "new-paper-target-reconstruction-metric-typo": Bad(
        "plan", r"paper_targets\[0\] \(n_sampling lcs@bon on aime / sft\): 'n_sampling/lcs@bon' is not among the "
                r"columns n_sampling writes under n_sampling\.metrics: .*n_sampling/lcs_length@aon",
        at("paper_targets", value=[{**TARGET, "method": "n_sampling", "metric": "lcs@bon", "dataset": "aime",
                                    "model": "sft"}])),
    "new-paper-target-on-a-pair-the-method-skips": Bad(
        "plan", r"paper_targets\[0\] \(n_sampling top5_auroc on aime / base\): n_sampling writes "
                r"'n_sampling/[a-z_]+@aon' on aime / sft, wikimia / base, not on aime / base",
        at("paper_targets", value=[{**TARGET, "method": "n_sampling", "metric": "top5_auroc", "dataset": "aime"}])),
    "new-paper-target-on-a-model-not-evaluated-on-the-dataset": Bad(
        "plan", r"paper_targets\[0\] \(loss auroc on aime / chat\): loss writes 'loss' on .*, not on aime / chat",
        at("paper_targets", value=[{**TARGET, "method": "loss", "dataset": "aime", "model": "chat"}])),
    "new-paper-target-top5-of-a-column": Bad(
        "plan", r"paper_targets\[0\] \(loss top5_auroc on wikimia / base\): top5_auroc is the mean of an attack's "
                r"five best metric AUROCs, and 'loss' has 0 score column\(s\) in this config; its attacks: .*n_sampling",
        at("paper_targets", value=[{**TARGET, "method": "loss", "metric": "top5_auroc"}])),
    "new-paper-target-metric-typo": Bad(
        "plan", r"paper_targets\[0\]\.metric: 'auc' does not match",
        at("paper_targets", value=[{**TARGET, "metric": "auc"}])),
    "new-paper-target-value-as-words": Bad(
        "plan", r"paper_targets\[0\]\.value: 'about 90' is none of the forms it accepts \(the paper's figure",
        at("paper_targets", value=[{**TARGET, "value": "about 90"}])),
    "new-paper-target-without-its-source": Bad(
        "plan", r"paper_targets\[0\]: 'source' is a required property",
        at("paper_targets", value=[{k: v for k, v in TARGET.items() if k != "source"}])),
    "new-baseline-method-not-run": Bad(
        "plan", r"evaluation\.baseline: 'min_k_plus_plus@0\.2' is a column of "
                r"min_k_plus_plus, which this config does not run",
        at("scoring", "methods", value=["loss", "zlib"])),
    "new-baseline-r-loss-without-reference": Bad(
        "plan", r"evaluation\.baseline: 'r_loss' is a column of r_loss, which "
                r"this config does not run",
        both(at("evaluation", "baseline", value="r_loss"),
             *[at("models", m, "reference", drop=True)
               for m in ("base", "sft", "chat", "grpo_e1", "grpo_e2")])),
    "new-primary-metric-typo": Bad(
        "plan", r"n_sampling\.primary_metric: 'lcs@aon' is not a metric the attacks score",
        at("n_sampling", "primary_metric", value="lcs@aon")),
    "new-primary-metric-without-its-encoder": Bad(
        "plan", r"n_sampling\.primary_metric: 'embedding_cosine@aon' is not a metric",
        both(at("n_sampling", "metrics", "embedding_model", value=None),
             at("n_sampling", "primary_metric", value="embedding_cosine@aon"))),
    "new-ngram-range-empty": Bad(
        "plan", r"n_sampling\.metrics\.n_min: 40 is more than n_max 30",
        at("n_sampling", "metrics", "n_min", value=40)),
    "new-heads-do-not-divide-hidden-size": Bad(
        "plan", r"models\.base\.architecture: hidden_size 128 is not a multiple of "
                r"num_heads 3",
        at("models", "base", "architecture", "num_heads", value=3)),
    "new-model-kind-typo": Bad(
        "plan", r"models\.base\.kind: 'pretrian' is not one of",
        at("models", "base", "kind", value="pretrian")),
    "new-lr-a-string": Bad(
        "plan", r"models\.base\.train\.lr: '1e-3' is not of type 'number'",
        at("models", "base", "train", "lr", value="1e-3")),
    "new-lr-negative": Bad(
        "plan", r"models\.base\.train\.lr: -0\.001 is less than or equal to the minimum of 0",
        at("models", "base", "train", "lr", value=-1e-3)),
    "new-steps-zero": Bad(
        "plan", r"models\.base\.train\.steps: 0 is less than the minimum",
        at("models", "base", "train", "steps", value=0)),
    "new-filler-fraction-zero": Bad(
        "plan", r"models\.base\.filler_fraction: 0 is less than or equal to the minimum",
        at("models", "base", "filler_fraction", value=0)),
    "new-member-repeats-negative": Bad(
        "plan", r"models\.base\.members\[0\]\.repeats: -1 is less than the minimum of 0",
        at("models", "base", "members", 0, "repeats", value=-1)),
    "new-member-dataset-unknown": Bad(
        "plan", r"models\.base\.members: unknown dataset 'wikimia64'; configured: wikimia, aime",
        at("models", "base", "members", 0, "dataset", value="wikimia64")),
    "new-member-key-typo": Bad(
        "plan", r"^models\.sft\.members\.repeat: unknown key; models\.sft\.members accepts: "
                r"dataset, repeats",
        at("models", "sft", "members", value={"dataset": "aime", "repeat": 3})),
    "new-init-unknown-model": Bad(
        "plan", r"models\.sft\.init: unknown model 'bsae'; configured: base",
        at("models", "sft", "init", value="bsae")),
    "new-reference-unknown-model": Bad(
        "plan", r"models\.base\.reference: unknown model 'ctrl'",
        at("models", "base", "reference", value="ctrl")),
    "new-model-its-own-reference": Bad(
        "plan", r"models\.sft\.reference: a model cannot be its own reference",
        at("models", "sft", "reference", value="sft")),
    "was-init-reference-cycle": Bad(
        "plan", r"models: cycle through init/reference: .*base -> sft -> base",
        at("models", "base", "reference", value="sft")),
    "new-evaluated-dataset-unknown": Bad(
        "plan", r"models\.chat\.datasets: unknown dataset 'wikipedia'",
        at("models", "chat", "datasets", value=["wikipedia"])),
    "new-contamination-rate-above-one": Bad(
        "plan", r"models\.sft\.contamination_rate: 1\.5 is greater than the maximum of 1",
        at("models", "sft", "contamination_rate", value=1.5)),
    "new-where-column-empty": Bad(
        "plan", r"models\.sft\.filler\.where\[0\]\.column: '' should be non-empty",
        at(*SFT_WHERE, "column", value="")),
    "new-where-in-a-single-value": Bad(
        "plan", r"models\.sft\.filler\.where\[0\]\.value: 2014 is not of type 'array'",
        at(*SFT_WHERE, "op", value="in")),
    "new-where-list-for-less-than": Bad(
        "plan", r"models\.sft\.filler\.where\[0\]\.value: \[2014\] should not be valid",
        at(*SFT_WHERE, "value", value=[2014])),
    "new-filler-key-typo": Bad(
        "plan", r"^models\.sft\.filler\.wher: unknown key; models\.sft\.filler accepts: source, columns, "
                r"where, max_words",
        at("models", "sft", "filler", "wher", value=[])),
    "new-rl-epoch-past-the-run": Bad(
        "plan", r"models\.grpo_e2\.epoch: 3 is past the run's last epoch \(train\.epochs = 2\)",
        at("models", "grpo_e2", "epoch", value=3)),
    "new-grpo-batch-not-whole-groups": Bad(
        "plan", r"models\.grpo_e2\.train\.batch_size: 30 .* not a multiple of "
                r"num_generations 4",
        at("models", "grpo_e2", "train", value={**_base("default")["models"]["grpo_e1"]["train"],
                                                "batch_size": 30})),
    "new-seq-len-beyond-context": Bad(
        "plan", r"models\.base\.train\.seq_len: 512 tokens exceed the 256-token context of base",
        at("models", "base", "train", "seq_len", value=512)),
    "new-effective-batch-not-whole": Bad(
        "plan", r"models\.sft\.train\.effective_batch_size: 12 is not a multiple of "
                r"micro_batch_size 8",
        at("models", "sft", "train", "effective_batch_size", value=12)),
    "new-dataset-name-with-space": Bad(
        "plan", r"^datasets: 'wiki mia' does not match",
        lambda c, t: c["datasets"].update({"wiki mia": c["datasets"]["wikimia"]})),
    "new-model-name-with-slash": Bad(
        "plan", r"^models: 'org/m' does not match",
        at("models", "org/m", value={"kind": "hf", "path": "org/m", "datasets": []})),
    "new-no-dataset": Bad(
        "plan", r"^datasets: \{\} should be non-empty",
        at("datasets", value={})),
    "new-no-model": Bad(
        "plan", r"^models: \{\} should be non-empty",
        at("models", value={})),
    "new-top-level-key-typo": Bad(
        "plan", r"^scorng: unknown key; the config accepts: overlay_of, .*scoring",
        at("scorng", value={"k": [0.1]})),
    "new-tokenizer-corpora-empty": Bad(
        "plan", r"tokenizer\.corpora: \[\] should be non-empty",
        at("tokenizer", "corpora", value=[])),
    "new-tokenizer-corpus-missing": Bad(
        "plan", r"tokenizer\.corpora\[1\]: 'resources/data/nope\.txt' does not exist",
        at("tokenizer", "corpora", 1, value="resources/data/nope.txt")),
    "new-tokenizer-vocab-too-small": Bad(
        "plan", r"tokenizer\.vocab_size: 10 is less than the minimum",
        at("tokenizer", "vocab_size", value=10)),
    "new-allow-duplicates-unknown-dataset": Bad(
        "plan", r"leakage\.allow_duplicates: unknown dataset\(s\) \['wiki'\]",
        at("leakage", "allow_duplicates", value=["wiki"])),
    "new-blind-warn-above-one": Bad(
        "plan", r"leakage\.blind_warn: 2 is greater than the maximum of 1",
        at("leakage", "blind_warn", value=2)),
    "new-lara-model-unknown": Bad(
        "plan", r"lara\.models: unknown model 'grpo_e3'",
        at("lara", "models", append="grpo_e3")),
    "new-lara-betas-empty": Bad(
        "plan", r"lara\.betas: \[\] should be non-empty",
        at("lara", "betas", value=[])),
    "new-lara-beta-nan": Bad(
        "plan", r"lara\.betas\[0\]: nan is not a finite number",
        at("lara", "betas", value=[NAN])),
    "new-lara-nested-type": Bad(
        "plan", r"lara\.baselines\.cdd\.n_samples: '4' is not of type 'integer'",
        at("lara", "baselines", "cdd", "n_samples", value="4")),
    "new-calibdcd-model-unknown": Bad(
        "plan", r"calibdcd\.models: unknown model 'instruct'",
        at("calibdcd", "models", "instruct", value={"family": "tiny"})),
    "new-calibdcd-family-unknown": Bad(
        "plan", r"calibdcd\.models\.chat\.family: 'gpt' is not one of",
        at("calibdcd", "models", "chat", "family", value="gpt")),
    "new-calibdcd-key-token-models-twice": Bad(
        "plan", r"calibdcd\.detectors\.veilprobe: name the key-token models once",
        at("calibdcd", "detectors", "veilprobe", "key_token_models", value=["control"])),
    "new-calibdcd-lr-nan": Bad(
        "plan", r"calibdcd\.detectors\.dpdllm\.finetune\.lr: nan is not a finite number",
        at("calibdcd", "detectors", "dpdllm", "finetune", "lr", value=NAN)),
    "new-prefix-ratio-nan": Bad(
        "plan", r"datasets\.wikimia\.pool\.prefix_ratio: nan is not a finite number",
        at("datasets", "wikimia", "pool", "prefix_ratio", value=NAN)),
    "new-grpo-temperature-inf": Bad(
        "plan", r"models\.grpo_e2\.train\.temperature: inf is not a finite number",
        at("models", "grpo_e2", "train", value={**_base("default")["models"]["grpo_e1"]["train"],
                                                "temperature": INF})),
    "new-n-sampling-target-unknown-model": Bad(
        "plan", r"n_sampling\.targets: unknown model 'sft2'",
        at("n_sampling", "targets", append={"model": "sft2", "dataset": "aime"})),
    "new-n-sampling-target-not-evaluated": Bad(
        "plan", r"n_sampling\.targets: model 'chat' is not evaluated on dataset 'aime'",
        at("n_sampling", "targets", append={"model": "chat", "dataset": "aime"})),
    "new-n-sampling-task-missing": Bad(
        "plan", r"n_sampling\.tasks: no task for dataset 'wikimia'",
        at("n_sampling", "tasks", "wikimia", drop=True)),
    "new-launch-nproc-zero": Bad(
        "plan", r"launch\.nproc: 0 is less than the minimum of 1",
        at("launch", "nproc", value=0)),
    # ---- further bad model folders ----
    "new-model-folder-without-config": Bad(
        "plan", r"models\.ext\.path: .*/m has no config\.json, so it is not a "
                r"transformers model folder",
        hf_model(lambda f: (f / "config.json").unlink())),
    "new-model-folder-without-tokenizer": Bad(
        "plan", r"models\.ext\.path: .*/m has no tokenizer \(tokenizer\.json, "
                r"tokenizer_config\.json",
        hf_model(lambda f: [(f / n).unlink() for n in ("tokenizer.json",
                                                        "tokenizer_config.json")])),
    "new-invalid-generation-config": Bad(
        "plan", r"models\.ext\.path: .*generation_config\.json is not valid JSON",
        hf_model(lambda f: (f / "generation_config.json").write_text("{'a': 1}"))),
    "new-sharded-weights-missing-a-shard": Bad(
        "plan", r"model\.safetensors\.index\.json names shard\(s\) that are not in "
                r"the folder: model-00002-of-00002\.safetensors",
        hf_model(lambda f: (f / "model.safetensors.index.json").write_text(json.dumps(
            {"weight_map": {"a": "model.safetensors",
                            "b": "model-00002-of-00002.safetensors"}})))),
    "new-tokenizer-of-another-model": Bad(
        "plan", r"models\.ext\.path: .*tokenizer\.json has token id 8, but config\.json's "
                r"vocab_size is 8: the tokenizer is not this model's",
        hf_model(lambda f: (f / "config.json").write_text('{"vocab_size": 8}'))),
    "new-model-path-a-file": Bad(
        "plan", r"models\.ext\.path: '.*config\.yaml' is a file; a model is a folder",
        at("models", "ext", value={"kind": "hf", "path": str(REPO / "config.yaml"), "datasets": []})),
    "new-reference-model-folder-broken": Bad(
        "plan", r"calibdcd\.detectors\.dpdllm\.reference_model: .*/m has no config\.json",
        lambda c, t: (model_folder(t / "m") / "config.json").unlink() or
        c["calibdcd"]["detectors"]["dpdllm"].update(reference_model=str(t / "m"))),
    # ---- further inputs that fail when the run starts ----
    "new-backend-option-device-on-a-cpu": Bad(
        "start", r"n_sampling\.backend_options\.device: 'cuda', but a job here sees 0",
        at("n_sampling", "backend_options", "device", value="cuda")),
    "new-lara-device-on-a-cpu": Bad(
        "start", r"lara\.baselines\.device: 'cuda:0', but a job here sees 0",
        at("lara", "baselines", "device", value="cuda:0")),
    "new-hub-revision-not-fetched": Bad(
        "start", r"models\.ext\.path: org/fetched \(revision 0123abc\)",
        lambda c, t: cache_hub_model(t, "org/fetched") or c["models"].update(
            ext={"kind": "hf", "path": "org/fetched", "revision": "0123abc", "datasets": []})),
    "new-hub-reference-model-not-fetched": Bad(
        "start", r"calibdcd\.detectors\.dpdllm\.reference_model: openai-community/gpt2",
        at("calibdcd", "detectors", "dpdllm", "reference_model", value="openai-community/gpt2")),
    # ---- further bad files, at their rule ----
    "new-label-two": Bad(
        "rule", r"two\.parquet: column 'label', row 1: int 2 is not a membership label",
        run=lambda t: build_pool(write(t / "two.parquet", wikimia_rows().assign(label=lambda d: d["label"] * 2)))),
    "new-bookmia-nan-label": Bad(
        "rule", r"b\.jsonl: column 'label', row 1: missing is not a membership label",
        run=lambda t: build_pool(write(t / "b.jsonl", pd.DataFrame(
            {"snippet": ["a b c d e f", "g h i j k l"], "label": [1, None], "book": ["x", "y"]})), family="bookmia")),
    "new-booktection-label-word": Bad(
        "rule", r"t\.csv: column 'Label', row 0: str 'member' is not a membership label",
        run=lambda t: build_pool(write(t / "t.csv", pd.DataFrame(
            {"Example_A": ["a b c d", "e f g h"], "Label": ["member", "non"], "ID": ["x", "y"]})),
            family="booktection")),
    "new-empty-parquet": Bad(
        "rule", r"e\.parquet: not a readable parquet file .*0 bytes",
        run=lambda t: (t / "e.parquet").touch() or build_pool(t / "e.parquet")),
    "new-jsonl-line-not-an-object": Bad(
        "rule", r"m\.jsonl: line 2 holds int '5', but the first line holds a row object",
        run=lambda t: build_pool(yaml_file(t, "m.jsonl", '{"input": "a b", "label": 1}\n5\n'))),
    "new-csv-row-with-extra-fields": Bad(
        "rule", r"x\.csv: not a readable csv file \(ParserError: .*Expected 2 fields in line 3",
        run=lambda t: build_pool(yaml_file(t, "x.csv", 'input,label\n"a b c",1\n"d e",0,3,4\n'))),
    "new-empty-csv": Bad(
        "rule", r"e\.csv: not a readable csv file \(EmptyDataError",
        run=lambda t: build_pool(yaml_file(t, "e.csv", ""))),
    "new-unsupported-file-type": Bad(
        "rule", r"w\.xlsx: unsupported file type '\.xlsx'; accepted formats: parquet",
        run=lambda t: build_pool(yaml_file(t, "w.xlsx", "x"))),
    "new-folder-without-tables": Bad(
        "rule", r"/d: folder holds no file of an accepted format",
        run=lambda t: (t / "d").mkdir() or build_pool(t / "d")),
    "new-empty-text": Bad(
        "rule", r"dataset 'd' pool \(.*b\.jsonl\): 1 row\(s\) with empty text",
        run=lambda t: build_pool(write(t / "b.jsonl", pd.DataFrame({"input": ["   ", "a b c d"], "label": [1, 0]})))),
    "new-pool-of-one-class": Bad(
        "rule", r"dataset 'd' pool \(.*one\.jsonl\): no non-members \(label=0\)",
        run=lambda t: build_pool(write(t / "one.jsonl", wikimia_rows().assign(label=1)))),
    "new-aime-years-outside-the-source": Bad(
        "rule", r"aime: pool\.membership .* selects none of the \d+ problems of "
                r".*aime_1983_2023\.json \(years 1983 to 2023\)",
        run=lambda t: build_pool(AIME, family="aime", membership={
        "rule": "random", "years": [2030, 2040]})),
    "new-where-compares-text-with-years": Bad(
        "rule", r"aime_1983_2023\.json: where\[0\]: column 'year' holds int64 values, "
                r"which op '<' cannot compare with '2014'",
        run=lambda t: read_corpus({"source": str(AIME), "columns": ["problem"],
                               "where": [{"column": "year", "op": "<",
                                          "value": "2014"}]})),
    "new-where-unknown-column": Bad(
        "rule", r"aime_1983_2023\.json: where\[0\] names column 'yr'; the columns are",
        run=lambda t: read_corpus({"source": str(AIME), "columns": ["problem"],
                               "where": [{"column": "yr", "op": "<", "value": 2014}]})),
    "new-filler-column-missing": Bad(
        "rule", r"aime_1983_2023\.json: missing column\(s\) \['problm'\]; found \['problem'",
        run=lambda t: read_corpus({"source": str(AIME), "columns": ["problm"]})),
    "new-where-keeps-nothing": Bad(
        "rule", r"corpus '.*aime_1983_2023\.json' \(where .*\) is empty",
        run=lambda t: read_corpus({"source": str(AIME), "columns": ["problem"],
                               "where": [{"column": "year", "op": "<", "value": 1000}]})),
    "new-empty-text-filler": Bad(
        "rule", r"models\.base\.filler: the filler holds no text",
        run=lambda t: check_filler("base", read_corpus(str(yaml_file(t, "empty.txt", " \n"))),
                               ["a member"])),
    "new-tampered-checkpoint-of-another-job": Bad(
        "rule", r"step-00000004: refused to resume .*it is the output of an earlier "
                r"job: delete that job's output folder",
        run=lambda t: resume_other_jobs_checkpoint(tampered_checkpoint(t))),
    "new-overlay-without-its-base": Bad(
        "file", r"o\.yaml: an overlay of config\.yaml \(overlay_of\), which is not given "
                r"before it; name both",
        run=lambda t: check_config_files([yaml_file(t, "o.yaml", "overlay_of: config.yaml\n")])),
    "new-two-complete-configs": Bad(
        "file", r"b\.yaml: a complete config \(no overlay_of\) cannot be merged after",
        run=lambda t: check_config_files([REPO / "config.yaml", yaml_file(t, "b.yaml", "seeds: [1]\n")])),
    "new-yte-template": Bad(
        "file", r"y\.yaml: __use_yte__ makes Snakemake evaluate the file's expressions as Python",
        run=lambda t: check_yaml_files([yaml_file(t, "y.yaml", "__use_yte__: true\nseeds: [0]\n")])),
}


#: what each place raises: the config checks' error (the leakage options' KeyError names its key too), and at a
#: rule the errors mialab raises naming the file (never a library's TypeError, IndexError, ...)
RAISES = {"plan": (ConfigError, KeyError), "start": (ConfigError,), "file": (ConfigError,),
          "rule": (ValueError, RuntimeError, FileNotFoundError)}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_names_its_fault(name, tmp_path):
    case = CASES[name]
    with pytest.raises(RAISES[case.where]) as err:
        if case.run is not None:
            case.run(tmp_path)
        else:
            cfg = copy.deepcopy(_base(case.base))
            case.change(cfg, tmp_path)
            (plan_checks if case.where == "plan" else start_checks)(cfg)
    message = str(err.value)
    assert re.search(case.expect, message, re.S), f"{type(err.value).__name__}: {message}"
    assert "weights_only=False" not in message and "Traceback" not in message
    assert not (tmp_path / "marker").exists()  # no tampered checkpoint ran its code


def test_the_table_holds_every_kind():
    assert len(CASES) >= 120
    assert {name.split("-")[0] for name in CASES} == {"issue", "was", "new"}
    assert {c.where for c in CASES.values()} == set(RAISES)


# -- good inputs next to the bad ones pass --------------------------------------------------------------
GOOD = {
    "the default config": lambda c, t: None,
    "a hub dataset with a revision": at("datasets", "wikimia", "pool", "source", value={
        "hub": "swj0419/WikiMIA", "split": "WikiMIA_length64", "revision": "abc"}),
    "a hub model id": at("models", "ext", value={"kind": "hf", "path": "openai-community/gpt2", "datasets": []}),
    "an intact model folder": hf_model(lambda f: None),
    "a sharded model folder": hf_model(lambda f: (f / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "model.safetensors"}}))),
    "labels as booleans or floats": lambda c, t: c["datasets"]["wikimia"]["pool"].update(
        source=str(write(t / "b.parquet", wikimia_rows(200).assign(label=lambda d: d["label"].astype(float)))),
        membership={"rule": "label"}),
    "a baseline among several k": both(at("scoring", "k", value=[0.1, 0.3]),
                                       at("evaluation", "baseline", value="min_k_plus_plus@0.3"),
                                       at("evaluation", "headline", value={"Min-K%++": "min_k_plus_plus@0.1"})),
    "headline rows of methods the config does not run": at("evaluation", "headline", value={
        "ADRA+": "adra_plus/lcs_ratio_ref@aon", "Loss": "loss"}),
    "a CUDA device a job would see": at("scoring", "device", value="cuda:0"),
    "paper targets of every kind the run computes, a lost one among them": at("paper_targets", value=[
        TARGET, {**TARGET, "metric": "tpr@5%fpr", "value": "not in the extracted text"},
        {**TARGET, "method": "n_sampling", "metric": "top5_auroc"},
        {**TARGET, "method": "n_sampling", "metric": "lcs_length@bon"},
        {**TARGET, "method": "lara/cdd", "dataset": "aime", "model": "grpo_e1"}]),
}


@pytest.mark.parametrize("name", list(GOOD))
def test_good_inputs_pass(name, tmp_path):
    cfg = copy.deepcopy(_base("default"))
    GOOD[name](cfg, tmp_path)
    plan_checks(cfg)
    check_devices(cfg, 1)


def test_a_fetched_hub_model_passes_when_the_run_starts(tmp_path):
    cfg = copy.deepcopy(_base("default"))
    cfg["models"]["ext"] = {"kind": "hf", "path": "org/fetched", "revision": "b" * 40, "datasets": []}
    cache_hub_model(tmp_path, "org/fetched", "b" * 40)
    start_checks(cfg)


def test_labels_read_as_booleans_or_floats_are_kept(tmp_path):
    rows = wikimia_rows(200)
    for labels in (rows["label"] == 1, rows["label"].astype(float)):
        pool = build_pool(write(tmp_path / "l.parquet", rows.assign(label=labels)))
        assert pool["label"].dtype == np.int8 and set(pool["label"]) == {0, 1}


def test_a_refused_checkpoint_is_not_resumed_again(tmp_path):
    """The SFT job's retry finds no checkpoint: the refused one was moved aside, kept for inspection."""
    folder = tampered_checkpoint(tmp_path)
    with pytest.raises(CheckpointRefused):
        resume_sft(folder)
    assert latest_checkpoint(folder.parent) is None and (folder.parent / "step-00000004.refused").is_dir()
    assert not (tmp_path / "marker").exists()


# -- the declarations the checks read -----------------------------------------------------------------------
def test_every_family_declares_its_keys_and_the_schema_dispatches_on_it():
    schema = config_schema()
    branches = schema["properties"]["datasets"]["additionalProperties"]["properties"]["pool"]["allOf"]
    dispatched = {b["if"]["properties"]["family"]["const"]: b["then"]["$ref"] for b in branches}
    assert set(schema["$defs"]["pools"]) - {"description"} == set(known_families()) == set(dispatched)
    assert all(ref == f"#/$defs/pools/{f}" for f, ref in dispatched.items())


def test_defaults_come_from_the_schema():
    """A family reads its defaults from its declaration (s1_1's members are DeepSeek's traces)."""
    fix = REPO / "tests" / "fixtures"
    pool = get_family("s1_1")({"source": str(next(fix.glob("s1*")))})
    assert set(pool.loc[pool["label"] == 1, "group"]) == {"deepseek"}


@pytest.mark.parametrize("path", [REPO / "config.yaml", *sorted((REPO / "configs" / "paper").glob("*.yaml"))],
                         ids=lambda p: p.stem)
def test_existing_configs_pass_the_schema_and_the_closed_pool_sections(path):
    cfg = yaml.safe_load(path.read_text())
    validate_config(cfg)
    check_pool_keys(cfg["datasets"])


def test_wikimia_rows_with_both_labels_are_dropped_with_a_warning(tmp_path, caplog):
    f = write(tmp_path / "w.parquet", pd.DataFrame({"input": ["one two three", "one two three", "four five six",
                                                              "seven eight"], "label": [1, 0, 1, 0]}))
    with caplog.at_level(logging.WARNING):
        pool = get_family("wikimia")({"source": str(f)})
    assert len(pool) == 2 and "one two three" not in set(pool["text"])
    assert "dropped 1 paragraph(s) that appear with both labels (2 rows), e.g. ids ['wikimia-" in caplog.text


def test_a_filler_smaller_than_the_members_is_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        check_filler("base", ["one two"], ["a much longer member text"] * 3)
    assert "models.base: the filler has 2 words, fewer than the 15 words" in caplog.text


# -- the Snakefile runs the checks, and failing jobs leave nothing behind ------------------------------------
SEEDS_LINE = next(n for n, line in enumerate((REPO / "config.yaml").read_text().splitlines(), 1)
                  if line.startswith("seeds:"))
WIRING = {
    # plan time (a dry run): the config files, the schema, finite numbers, the columns
    "duplicate key": ("file", lambda text: text.replace("seeds:", "seeds: [7]\nseeds:", 1),
                      f"config.yaml:{SEEDS_LINE + 1}: key 'seeds' given twice in one mapping "
                      f"(first at line {SEEDS_LINE})"),
    "YTE template": ("file", lambda text: "__use_yte__: true\n" + text,
                     "config.yaml: __use_yte__ makes Snakemake evaluate the file's expressions as Python"),
    "where op": ("plan", lambda text: text.replace('op: "<"', 'op: "=~"', 1),
                 "models.sft.filler.where[0].op: '=~' is not one of"),
    "nan": ("plan", lambda text: text.replace("lr: 5.0e-4", "lr: .nan", 1),
            "models.sft.train.lr: nan is not a finite number"),
    "k": ("plan", lambda text: text.replace("k: [0.2]", "k: [0.1]", 1),
          "evaluation.baseline: 'min_k_plus_plus@0.2' is not among the columns"),
    "paper target": ("plan", lambda text: text + "paper_targets: [{method: min_k_plus_plus@0.3, dataset: wikimia, "
                                              "model: base, metric: auroc, value: 95.5, source: {paper: P, table: T, "
                                              "row: R}}]\n",
                     "paper_targets[0] (min_k_plus_plus@0.3 auroc on wikimia / base): 'min_k_plus_plus@0.3' is not among"),
    # run start (not in a dry run): devices, hub models
    "device": ("start", lambda text: text.replace("device: auto", "device: cuda:7", 1),
               "scoring.device: 'cuda:7', but"),
    "hub model": ("start", lambda text: text.replace("models:\n", "models:\n  ext: {kind: hf, path: org/never-fetched, "
                                                                 "datasets: []}\n", 1),
                  "models.ext.path: org/never-fetched (revision unpinned"),
}


@pytest.mark.parametrize("name", list(WIRING))
def test_the_snakefile_runs_the_checks(name, tmp_path, monkeypatch):
    """Each kind of check fails the workflow itself, before any job (a dry run for the plan's, a run for
    the start's: the run fails where a job would otherwise have started)."""
    where, edit, expect = WIRING[name]
    wd = make_workdir(tmp_path / "wd")
    (wd / "config.yaml").write_text(edit((REPO / "config.yaml").read_text()))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))  # an empty hub cache
    proc = snakemake(wd, *(("-n",) if where != "start" else ("--cores", "1", "splits")), check=False)
    assert proc.returncode != 0 and expect in proc.stdout + proc.stderr, proc.stderr[-3000:]
    assert not (wd / "results").exists()


def test_failing_jobs_leave_no_output(tmp_path):
    """build_pool / build_split jobs on bad files (one Snakemake run): each fails naming its fault in its
    log, and leaves neither its output nor a temporary file."""
    bad = {"missing_column": (write(tmp_path / "c.parquet", pd.DataFrame({"text": ["a b"] * 4, "label": [1, 0] * 2})),
                              "missing column(s) ['input']"),
           "nan_label": (write(tmp_path / "n.parquet", wikimia_rows().astype({"label": float}).assign(label=np.nan)),
                         "column 'label', row 0: missing is not a membership label"),
           "truncated": (truncated(WIKIMIA, tmp_path / "t.parquet", 100), "not a readable parquet file"),
           "large_split": (WIKIMIA, "lower datasets.large_split.split.n_per_class to at most")}
    cfg = default_config()
    cfg["seeds"] = [0]
    cfg["datasets"] = {name: {"pool": {**cfg["datasets"]["wikimia"]["pool"], "source": str(source),
                                       "membership": {"rule": "label"}},
                              "split": {"n_per_class": 400}} for name, (source, _) in bad.items()}
    cfg["tokenizer"]["corpora"] = cfg["tokenizer"]["corpora"][:1]
    cfg["models"] = {"control": {**cfg["models"]["control"], "members": []}}
    cfg = {k: v for k, v in cfg.items() if k not in ("calibdcd", "lara", "n_sampling")}
    cfg["evaluation"]["headline"] = {"Loss": "loss"}
    cfg["evaluation"]["baseline"] = "loss"
    wd = make_workdir(tmp_path / "wd", cfg)
    proc = snakemake(wd, "--cores", "1", "--keep-going", "splits", check=False)
    assert proc.returncode != 0
    logs = [p.read_text() for p in (wd / "results" / "logs").rglob("*.log")]
    for name, (_, expect) in bad.items():
        assert any(expect in text for text in logs), (name, proc.stderr[-3000:])
        rule, output = ("build_split", "split.parquet") if name == "large_split" else ("build_pool", "pool.parquet")
        assert not list((wd / "results").glob(f"{'splits' if rule == 'build_split' else 'pools'}/{name}/**/{output}"))
    assert not [p for p in (wd / "results").rglob("*") if ".tmp" in p.name]
