"""The settings references of the paper experiments (docs/fidelity/; the format: docs/fidelity/README.md) hold what
each job of the paper configs receives, key by key: every setting equals the released code's or is a named
deviation with its reason, listed in docs/fidelity.md. Runs without the released code (the references are
committed); with LARA_CODE / MIA_RL_CODE / DPDLLM_CODE / VEILPROBE_CODE naming a checkout of a method's (a
detector's) code, regenerates its references from the code and compares."""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
from pathlib import Path

import pytest
from workflow_helpers import REPO

from mialab.adra import fidelity as adra
from mialab.calibdcd import fidelity as calibdcd
from mialab.lara import fidelity as lara
from mialab.pipeline.fidelity import (
    Derived,
    Find,
    FString,
    ReferenceError,
    Setting,
    ShellArray,
    ShellValue,
    Table,
    YamlKey,
    code_checkout,
    dump,
    load,
    reference,
    refresh,
)

METHODS = {"lara": lara, "adra": adra, "calibdcd": calibdcd}


def generator():
    """benchmarks/fidelity_reference.py as a module (it writes the references, the summary and the header)."""
    spec = importlib.util.spec_from_file_location("fidelity_reference", REPO / "benchmarks" / "fidelity_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", params=list(METHODS))
def method(request):
    return METHODS[request.param]


@pytest.fixture(scope="module")
def refreshed(method) -> dict[str, dict]:
    """Every reference of a method, its project side recomputed from the paper configs as written (an unexplained
    difference or a stale reason raises here, naming the setting)."""
    return method.documents()


def test_every_experiment_of_the_paper_config_has_its_reference():
    config = lara.paper_config()
    targets = {(t["model"], t["dataset"]) for t in config["lara"]["targets"]}
    released = {m for m, s in config["models"].items() if s["kind"] == "hf"}
    assert {(e.model, e.dataset) for e in lara.EXPERIMENTS.values()} == {(m, m) for m in released} <= targets
    for name, e in lara.EXPERIMENTS.items():
        assert set(e.rl) == {m for m, s in config["models"].items() if s["kind"] == "rl" and s["init"] == e.model}
        assert lara.document_path(name).is_file(), f"{name}: run benchmarks/fidelity_reference.py with LARA_CODE"


def test_every_adra_experiment_of_the_paper_configs_has_its_reference():
    """Each (model, dataset) of an ADRA paper config's adra.targets, in each of its variants, is an experiment."""
    import yaml

    planned = set()
    for path in sorted((REPO / "configs" / "paper").glob("adra_*.yaml")):
        section = yaml.safe_load(path.read_text())["adra"]
        planned |= {(f"configs/paper/{path.name}", t["model"], t["dataset"], v) for t in section["targets"]
                    for v in section["variants"]}
    assert {(e.config, e.model, e.dataset, e.variant) for e in adra.EXPERIMENTS.values()} == planned
    for name in adra.EXPERIMENTS:
        assert adra.document_path(name).is_file(), f"{name}: run benchmarks/fidelity_reference.py with MIA_RL_CODE"


def test_every_calibdcd_experiment_of_the_paper_config_has_its_reference():
    """Each (detector, dataset) of the CalibDCD paper config's calibdcd section is an experiment, on its targets."""
    section = calibdcd.paper_config()["calibdcd"]
    assert {(e.detector, e.dataset) for e in calibdcd.EXPERIMENTS.values()} == {
        (d, ds) for d in section["detectors"] for ds in section["datasets"]}
    for name, e in calibdcd.EXPERIMENTS.items():
        assert list(e.models) == list(section["models"])
        assert calibdcd.document_path(name).is_file(), (
            f"{name}: run benchmarks/fidelity_reference.py with {calibdcd.CODE_ENV[e.detector]}")


def test_the_committed_references_hold_what_the_paper_configs_jobs_receive(method, refreshed):
    """The committed files are what the generator writes from the current config: a config change that moves a
    setting away from the code's (or onto it) fails here until the spec says why and the files are regenerated."""
    for name, doc in refreshed.items():
        path = method.document_path(name)
        assert dump(doc) == path.read_text(), f"{path} is stale: run python benchmarks/fidelity_reference.py"
        assert load(path) == doc                                         # the YAML round-trips
        statuses = [r["status"] for r in doc["settings"]]
        assert doc["counts"] == {"settings": len(statuses), **{s: statuses.count(s) for s in
                                                                 ("equal", "deviation", "not_applicable")}}
        for row in doc["settings"]:
            assert row["source"].split(":")[0].split(" (")[0], row
            if row["status"] != "equal":
                assert len(row["reason"]) > 20, row["name"]
                assert not row["reason"].startswith("open:"), (name, row["name"])   # every difference settled


def test_the_summary_and_the_config_header_are_generated_from_the_references():
    """docs/fidelity.md lists every named deviation with its reason and each experiment's counts; the paper
    config's header line gives the counts: both as the generator writes them."""
    stale = [str(p.relative_to(REPO)) for p, text in generator().outputs(None).items() if p.read_text() != text]
    assert not stale, f"stale: {stale}; run python benchmarks/fidelity_reference.py"


def test_the_settings_tests_exist(method):
    for name in method.EXPERIMENTS:
        for row in load(method.document_path(name))["settings"]:
            if "test" in row:
                path, function = row["test"].split("::")
                tree = ast.parse((REPO / path).read_text())
                assert function in {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}, row["test"]


def test_the_high_impact_adra_settings_are_the_codes():
    """The ADRA differences issue #36 names hold no more: the contamination SFT's draws (16 / 32 members by seed 2, the
    Tulu-3 rows by seed 1, 10%) and the Olympiad SFT's lr 5e-6, batch 128, constant schedule; the reward's reference
    (target_gt, the whole target); every prompt rendered as verl renders it (the chat template or verl's fallback,
    no special token)."""
    docs = {name: load(adra.document_path(name)) for name in adra.EXPERIMENTS}
    for name, doc in docs.items():
        rows = {r["name"]: r for r in doc["settings"]}
        names = ["prompt.chat_template", "prompt.fallback_template", "prompt.special_tokens",
                 "data.assistant_prefix_ratio" if "s1" not in doc["models"]["dataset"] else "data.subset_size"]
        if doc["models"]["variant"] != "adra_sft":
            names.append("data.include_target_gt")
        if "sft.contamination_size" in rows:
            names += ["sft.contamination_size", "sft.contamination_seed", "sft.general_dataset", "sft.general_seed",
                      "sft.contamination_percentage", "sft.learning_rate", "sft.effective_batch_size",
                      "sft.lr_scheduler_type"]
        for setting in names:
            assert rows[setting]["status"] == "equal", (name, setting, rows[setting])
    olympiad = {r["name"]: r["value"] for r in docs["adra_olympiad"]["settings"]}
    assert (olympiad["sft.learning_rate"], olympiad["sft.effective_batch_size"], olympiad["sft.lr_scheduler_type"],
            olympiad["sft.contamination_size"]) == (5e-6, 128, "constant", 32)
    assert {r["name"]: r["value"] for r in docs["adra_aime"]["settings"]}["sft.contamination_size"] == 16


def test_the_high_impact_settings_are_the_codes():
    """The differences issue #36 names hold no more: verl's 16 updates per 128-prompt batch, advantages without
    the group std, the chat-rendered RL prompts with the code's system turns, the paraphrases' prompt (the committed
    references, which test_the_committed_references_hold_what_the_paper_configs_jobs_receive holds to the config)."""
    for doc in (load(lara.document_path(name)) for name in lara.EXPERIMENTS):
        rows = {r["name"]: r for r in doc["settings"]}
        for name in ("rl.actor.updates_per_batch", "rl.data.train_batch_size", "rl.actor.ppo_mini_batch_size",
                     "rl.algorithm.grpo_use_std", "rl.actor.loss_remove_token_mean", "rl.actor.loss_scale",
                     "rl.corpus.chat", "rl.corpus.member_system", "rl.corpus.filler_system",
                     "rl.corpus.member_template", "rl.actor.optim.weight_decay", "perturbations.paraphrase.prompt",
                     "perturbations.min_valid_neighbours", "baselines.perturbation_prefix",
                     "baselines.prompt_template", "features.dtype"):
            assert rows[name]["status"] == "equal", (doc["experiment"], name, rows[name])
        assert rows["rl.actor.updates_per_batch"]["value"] == 16 and rows["rl.trainer.steps_per_epoch"]["value"] == 112


def test_the_calibdcd_detectors_run_as_their_code():
    """The detectors' training and sampling settings issue #36 names are their code's: DPDLLM's reference fine-tuning
    (15 epochs, batch 4, Adam lr 5e-5 to 0, the lowest-perplexity epoch), packing length, sampling (T 0.7, 32 new
    tokens, 16 prompt words), features and classifier; VeilProbe's perturbation (IPOT beta 2, 1000 steps, 10 beams,
    10 new tokens, top-p 0.9999, key tokens 13 of 26, fill-mask top 5), query (the whole text), target output (T 0.2,
    512 tokens), mapping models (three pairs per text), pruning (p 0.01) and prototypical network; every difference
    left is a named one."""
    for name, e in calibdcd.EXPERIMENTS.items():
        rows = {r["name"]: r for r in load(calibdcd.document_path(name))["settings"]}
        if e.detector == "dpdllm":
            names = [n for n in rows if n.startswith(("reference.", "target.", "features."))
                     and n not in ("reference.texts", "target.model")] + ["classifier.model"]
            differ = {"reference.texts", "classifier.score"}
        else:
            names = [n for n in rows if n.startswith(("perturbation.", "mapping.", "classifier.", "target."))
                     and n not in ("target.model", "target.generations", "classifier.split", "mapping.tokenizer",
                                   "mapping.perturbed_model_is_original")]
            differ = {"target.generations", "mapping.tokenizer", "mapping.perturbed_model_is_original"}
        for setting in names:
            assert rows[setting]["status"] == "equal", (name, setting, rows[setting])
        assert {n for n, r in rows.items() if r["status"] == "deviation"} == differ, name
    veilprobe = {r["name"]: r["value"] for r in load(calibdcd.document_path("calibdcd_veilprobe_wikimia"))["settings"]}
    assert (veilprobe["perturbation.ipot_beta"], veilprobe["perturbation.key_tokens"],
            veilprobe["perturbation.candidates_per_model"], veilprobe["classifier.prune_p"]) == (2, 13, 26, 0.01)


def test_a_methods_checkouts_come_from_its_variables():
    """One variable per method, or one per part (CalibDCD's detectors): the parts whose variable is set."""
    env = {"LARA_CODE": "/code/lara", "DPDLLM_CODE": "/code/dpdllm", "VEILPROBE_CODE": ""}
    assert code_checkout("LARA_CODE", env) == Path("/code/lara")
    assert code_checkout("MIA_RL_CODE", env) is None
    assert code_checkout(calibdcd.CODE_ENV, env) == {"dpdllm": Path("/code/dpdllm")}
    assert code_checkout(calibdcd.CODE_ENV, {}) is None


def fake_checkout(tmp_path: Path) -> Path:
    """A git checkout of a tiny released code: a launch script, a Hydra config, a prompt f-string, a data file."""
    import pandas as pd

    root = tmp_path / "code"
    (root / "cfg").mkdir(parents=True)
    (root / "run.sh").write_text("python3 -m train \\\n    data.train_batch_size=128 \\\n    actor.lr=1e-6 \\\n"
                                 'BLANKS="${BLANKS:-1}"\n')
    (root / "prep.sh").write_text('SEED=2\nPROMPT="Go on. "\ndeclare -a ATTACKS=(\n  "loss"\n  "min_k++"  # the last\n)\n'
                                  "python prep.py \\\n    --seed ${SEED} \\\n    --years 2021 2022 \\\n"
                                  '    --prompt "$PROMPT" \\\n#     --size 16 \\\n    lr=${SEED}\n')
    (root / "cfg" / "trainer.yaml").write_text("critic:\n  clip: 0.5\nactor:\n  clip: 0.2\n  shuffle: False\n")
    (root / "gen.py").write_text('def ask(q, n):\n    x = 1\n    prompt = f"""Write {n} {{json}} items for:\n{q}"""\n')
    pd.DataFrame({"member": [1, 0, 0]}).to_parquet(root / "set.parquet")
    for args in (["init", "-q"], ["add", "."], ["-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(root), *args], check=True)
    return root


def test_locators_read_the_value_and_its_line_and_a_difference_needs_its_reason(tmp_path):
    root = fake_checkout(tmp_path)
    located = {
        "batch": Find("run.sh", r"^\s+data[.]train_batch_size=(\S+)").locate(root),
        "lr": Find("run.sh", r"^\s+actor[.]lr=(\S+)").locate(root),
        "blanks": Find("run.sh", r'^BLANKS="\$\{BLANKS:-([^}]*)\}"').locate(root),
        "clip": Find("cfg/trainer.yaml", r"^\s+clip: (\S+)", after=r"^actor:").locate(root),
        "shuffle": Find("cfg/trainer.yaml", r"^\s+shuffle: (\S+)").locate(root),
        "prompt": FString("gen.py", "ask", fields={"n": "{m}", "q": "{question}"}).locate(root),
        "members": Table("set.parquet", lambda f: int(f["member"].sum()), "member rows").locate(root),
        "per_member": Derived(lambda b, m: b // m, (Find("run.sh", r"train_batch_size=(\d+)"),
                                                    Table("set.parquet", lambda f: int(f["member"].sum()), "m"))
                              ).locate(root),
        "seed": ShellValue("prep.sh", r"^\s+--seed (\S+)").locate(root),
        "years": ShellValue("prep.sh", r"^\s+--years (.+?) \\", many=True).locate(root),
        "prompt": ShellValue("prep.sh", r"^\s+--prompt (\S+)", raw=True).locate(root),
        "size": ShellValue("prep.sh", r"^\s*#?\s*--size (\S+)").locate(root),
        "attacks": ShellArray("prep.sh", "ATTACKS").locate(root),
        "actor_clip": YamlKey("cfg/trainer.yaml", "actor.clip").locate(root),
    }
    assert {k: (v.value, v.source) for k, v in located.items()} == {
        "batch": (128, "run.sh:2"), "lr": (1e-6, "run.sh:3"), "blanks": (1, "run.sh:4"),
        "clip": (0.2, "cfg/trainer.yaml:4"), "shuffle": (False, "cfg/trainer.yaml:5"),
        "prompt": ("Write {m} {{json}} items for:\n{question}", "gen.py:3"),
        "members": (1, "set.parquet (member rows)"), "per_member": (128, "run.sh:2, set.parquet (m)"),
        "seed": (2, "prep.sh:1, 8"), "years": ([2021, 2022], "prep.sh:9"), "prompt": ("Go on. ", "prep.sh:2, 10"),
        "size": (16, "prep.sh:11"), "attacks": (["loss", "min_k++"], "prep.sh:3-6"),
        "actor_clip": (0.2, "cfg/trainer.yaml:4")}
    with pytest.raises(ReferenceError, match="run.sh: no line matches"):
        Find("run.sh", r"epochs=(\d+)").locate(root)
    resolved = {"rl": {"rollout": 128, "lr": 3e-6}}
    header = {"experiment": "x", "released_code": {"repo": "o/r"}}
    equal = Setting("batch", "rl_contaminate", Find("run.sh", r"train_batch_size=(\d+)"), "rl.rollout")
    differs = Setting("lr", "rl_contaminate", Find("run.sh", r"lr=(\S+)"), "rl.lr")
    with pytest.raises(ReferenceError, match="lr: an unexplained difference: the code's 1e-06 .*run.sh:3"):
        reference(header, [equal, differs], root, resolved)
    named = Setting("lr", "rl_contaminate", Find("run.sh", r"lr=(\S+)"), "rl.lr", reason="a larger step on purpose")
    doc = reference(header, [equal, named], root, resolved)
    assert doc["counts"] == {"settings": 2, "equal": 1, "deviation": 1, "not_applicable": 0}
    assert doc["settings"][1] | {} == {"name": "lr", "stage": "rl_contaminate", "value": 1e-6, "source": "run.sh:3",
                                       "project": "rl.lr", "project_value": 3e-6, "status": "deviation",
                                       "expected": 1e-6, "reason": "a larger step on purpose"}
    with pytest.raises(ReferenceError, match="lr: the project now equals the code"):
        refresh(doc, [equal, named], {"rl": {"rollout": 128, "lr": 1e-6}})
    with pytest.raises(ReferenceError, match="regenerate it from the released code"):
        refresh(doc, [equal], resolved)


def test_the_references_regenerate_from_the_released_code(method):
    """Every value and file:line read again from the checkout LARA_CODE / MIA_RL_CODE / DPDLLM_CODE / VEILPROBE_CODE
    names: the committed references are its."""
    checkout = code_checkout(method.CODE_ENV, os.environ)
    if checkout is None:
        names = method.CODE_ENV if isinstance(method.CODE_ENV, str) else " / ".join(method.CODE_ENV.values())
        pytest.skip(f"{names} names no checkout of the released code")
    for name, doc in method.documents(checkout).items():
        assert dump(doc) == method.document_path(name).read_text(), (
            f"{name}: the released code at {doc['released_code']['commit']} reads otherwise; "
            f"run {method.CODE_ENV}=... python benchmarks/fidelity_reference.py")
