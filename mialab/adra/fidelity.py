"""ADRA's settings references (``docs/fidelity/<variant>_<dataset>.yaml``; the format: ``docs/fidelity/README.md``).

One experiment per (dataset, model, variant) of the ADRA paper configs (``configs/paper/adra_*.yaml``): ADRA,
ADRA+ or the RL-vs-SFT ablation on one target. The released code (github oseyosey/MIA-RL, a verl fork, read from
a local checkout named by ``$MIA_RL_CODE``, never copied) sets each in: its data script
(``scripts/**/prepare_*.sh`` over ``verl/examples/data_preprocess/*_custom_mia.py``), its RL launch
(``scripts/**/submit_run_*.sh`` over verl's Hydra defaults ``verl/verl/trainer/config/ppo_trainer.yaml``, its
dataset, worker and reward code), its evaluation (``scripts/**/run_mia_*_rl_eval_full.sh`` over
``verl.trainer.main_generation``; ``run_mia_*_n-sampling_eval.sh`` for N-Sampling; ``run_mia_*_baselines.sh``) and,
for the controlled contamination, its SFT mix (``adra/scripts/produce_checkpoints/produce_data_mix_sft_*.sh`` over
``adra/utils_rl/data_mixer.py`` and ``produce_checkpoint_trl_mixed_dataset.py``). Where the release lacks an
experiment's own script, the nearest one is read and the document's ``notes`` say which.

:func:`settings` is the spec of an experiment; :func:`resolved_settings` is what the jobs of the paper config
receive (the plan's stage configs, the GRPO arithmetic on the GPUs an ``adra_train`` job gets, the prompt files,
the code's constants), built in-process from the config as written.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path

from mialab.core.paths import REPO
from mialab.pipeline.fidelity import (
    Derived,
    Find,
    FString,
    Setting,
    ShellArray,
    ShellValue,
    YamlKey,
    argparse_default,
)

#: the environment variable naming a local checkout of the released code (the reward test's)
CODE_ENV = "MIA_RL_CODE"
RELEASED = {"repo": "oseyosey/MIA-RL"}
DOCS = REPO / "docs" / "fidelity"
PAPER = "ADRA (Yin et al. 2026)"

PPO = "verl/verl/trainer/config/ppo_trainer.yaml"
MAIN_PPO = "verl/verl/trainer/main_ppo.py"
MAIN_GEN = "verl/verl/trainer/main_generation.py"
RL_DATASET = "verl/verl/utils/dataset/rl_dataset.py"
LEXICAL = "verl/verl/utils/reward_score/lexical.py"
DP_ACTOR = "verl/verl/workers/actor/dp_actor.py"
TRAINER = "verl/verl/trainer/ppo/ray_trainer.py"
WORKERS = "verl/verl/workers/fsdp_workers.py"
PREPROCESS = {"post": "verl/examples/data_preprocess/post_training_custom_mia.py",
              "pre": "verl/examples/data_preprocess/pre_training_custom_mia.py",
              "s1": "verl/examples/data_preprocess/s1_match_custom_mia.py"}
MIXER = "adra/utils_rl/data_mixer.py"
SFT_TRAIN = "adra/scripts/produce_checkpoints/produce_checkpoint_trl_mixed_dataset.py"
CHECKPOINTS = "adra/utils_rl/checkpoint_manager.py"
S1_SFT = "adra/scripts/produce_checkpoints/produce_checkpoint_trl_qwen2.5-7b_s1k.py"
RUN_MIA = "adra/scripts/run_mia.py"
MIA_DATASETS = "adra/mia/datasets.py"
EVALUATION = "adra/utils_rl/reconstruction_evaluation.py"
NGRAM = "adra/utils_rl/ngram_coverage.py"
PT, PRE, DIST = "scripts/post-training", "scripts/pre-training", "scripts/distillation"
CKPT = "adra/scripts/produce_checkpoints"
T_ADRA = "tests/test_adra.py::"
T_GEN = "tests/test_generation.py::"
T_SFT = "tests/test_sft_chat.py::"
T_ROUNDING = "tests/test_prefix_rounding.py::"
T_RECON = "tests/test_reconstruction.py::"


@dataclass(frozen=True)
class Scripts:
    """Where the released code keeps one dataset's run: the data scripts (``prepare``: ADRA's, ADRA+'s), the RL
    launches (``submit``), the RL evaluations (``evaluate``; None where none is released), N-Sampling's evaluation,
    the passive baselines, the SFT mix (controlled contamination) and ``notes``: each a script read in place of one
    the release lacks (variant -> why)."""

    kind: str
    prepare: dict[str, str]
    submit: dict[str, str]
    evaluate: dict[str, str | None]
    nsampling: str
    baselines: str
    mix: str | None = None
    notes: dict[str, str] = field(default_factory=dict)


def _pair(adra: str | None, plus: str | None) -> dict[str, str | None]:
    return {"adra": adra, "adra_plus": plus}


_AIME_NOTE = ("the release has no ADRA+ evaluation script for AIME: its ADRA script "
              "(run_mia_aime_adra_rl_eval_full.sh) evaluates either policy")
SCRIPTS: dict[str, Scripts] = {
    "aime": Scripts(
        "post", _pair(f"{PT}/aime/prepare_aime_mia_data_lexical_adra.sh",
                      f"{PT}/aime/prepare_aime_mia_data_lexical_adra-plus.sh"),
        _pair(f"{PT}/aime/submit_run_aime_adra_original_lora_h200_8.sh",
              f"{PT}/aime/submit_run_aime_adra-plus_original_lora_h200_8.sh"),
        _pair(f"{PT}/aime/run_mia_aime_adra_rl_eval_full.sh", f"{PT}/aime/run_mia_aime_adra_rl_eval_full.sh"),
        f"{PT}/aime/run_mia_aime_n-sampling_eval.sh", f"{PT}/aime/run_mia_aime_original_baselines.sh",
        f"{CKPT}/produce_data_mix_sft_aime_original.sh", {"adra_plus": _AIME_NOTE}),
    "aime_paraphrased": Scripts(
        "post", _pair(f"{PT}/aime/prepare_aime_mia_data_lexical_adra.sh",
                      f"{PT}/aime/prepare_aime_paraphrased_mia_data_lexical_adra-plus.sh"),
        _pair(f"{PT}/aime/submit_run_aime_adra_paraphrased_lora_h200_8.sh",
              f"{PT}/aime/submit_run_aime_adra-plus_paraphrased_lora_h200_8.sh"),
        _pair(f"{PT}/aime/run_mia_aime_adra_rl_eval_full.sh", f"{PT}/aime/run_mia_aime_adra_rl_eval_full.sh"),
        f"{PT}/aime/run_mia_aime_paraphrased_n-sampling_eval.sh", f"{PT}/aime/run_mia_aime_paraphrased_baselines.sh",
        f"{CKPT}/produce_data_mix_sft_aime_paraphrase.sh",
        {"adra": "the release has no paraphrased ADRA data script: its paraphrased ADRA launch reads the original's "
                 "data (the SFT alone trains on paraphrases); no paraphrased AIME evaluation script: the original's",
         "adra_plus": "no paraphrased AIME evaluation script: the original's"}),
    "olympiad_math": Scripts(
        "post", _pair(f"{PT}/olympia-math/prepare_olympiads_mia_data_lexical_adra.sh",
                      f"{PT}/olympia-math/prepare_olympiads_mia_data_lexical_adra-plus.sh"),
        _pair(f"{PT}/olympia-math/submit_run_olympiads_adra_original_lora_h200_8.sh",
              f"{PT}/olympia-math/submit_run_olympiads_adra_original_lora_h200_8.sh"),
        _pair(f"{PT}/olympia-math/run_mia_olympia_adra_rl_eval_full.sh",
              f"{PT}/olympia-math/run_mia_olympia_adra_rl_eval_full.sh"),
        f"{PT}/olympia-math/run_mia_olympiads_n-sampling_eval.sh",
        f"{PT}/olympia-math/run_mia_olympiads_original_baselines.sh",
        f"{CKPT}/produce_data_mix_sft_olympia_original.sh",
        {"adra_plus": "the release has no ADRA+ launch for the original Olympiad set: its ADRA launch (the paraphrased "
                      "ADRA+ launch differs in total_epochs 100 and ADRA_USE_DYNAMIC_MAX_NGRAM, which trio does not "
                      "read)"}),
    "olympiad_math_paraphrased": Scripts(
        "post", _pair(f"{PT}/olympia-math/prepare_olympiads_mia_data_lexical_adra.sh",
                      f"{PT}/olympia-math/prepare_olympiads_paraphrased_mia_data_lexical_adra-plus.sh"),
        _pair(f"{PT}/olympia-math/submit_run_olympiads_adra_original_lora_h200_8.sh",
              f"{PT}/olympia-math/submit_run_olympiads_adra-plus_paraphrased_lora_h200_8.sh"),
        _pair(f"{PT}/olympia-math/run_mia_olympia_paraphrased_adra_rl_eval_full.sh",
              f"{PT}/olympia-math/run_mia_olympia_paraphrased_adra_rl_eval_full.sh"),
        f"{PT}/olympia-math/run_mia_olympiads_paraphrased_n-sampling_eval.sh",
        f"{PT}/olympia-math/run_mia_olympiads_paraphrased_baselines.sh",
        f"{CKPT}/produce_data_mix_sft_olympia_paraphrased.sh",
        {"adra": "the release has no paraphrased Olympiad ADRA data script or launch: the original's (the SFT alone "
                 "trains on paraphrases)"}),
    "aya": Scripts(
        "post", _pair(f"{PT}/tulu3-aya/prepare_tulu3-aya_mia_data_lexical_adra.sh",
                      f"{PT}/tulu3-aya/prepare_tulu3-aya_mia_data_lexical_adra-plus.sh"),
        _pair(f"{PT}/tulu3-aya/submit_run_tulu3-aya_adra_original_lora_h200_8.sh",
              f"{PT}/tulu3-aya/submit_run_tulu3-aya_adra-plus_original_lora_h200_8.sh"),
        _pair(f"{PT}/tulu3-aya/run_mia_tulu3-aya_adra_rl_eval_full.sh",
              f"{PT}/tulu3-aya/run_mia_tulu3-aya_adra-plus_rl_eval_full.sh"),
        f"{PT}/tulu3-aya/run_mia_tulu3-aya_n-sampling_eval.sh", f"{PT}/tulu3-aya/run_mia_tulu3-aya_baselines.sh"),
    "wildchat": Scripts(
        "post", _pair(f"{PT}/tulu3-wildchat/prepare_tulu3-wildchat_mia_data_lexical_adra.sh",
                      f"{PT}/tulu3-wildchat/prepare_tulu3-wildchat_mia_data_lexical_adra-plus.sh"),
        _pair(f"{PT}/tulu3-wildchat/submit_run_tulu3-wildchat_adra_original_lora_h200_8.sh",
              f"{PT}/tulu3-wildchat/submit_run_tulu3-wildchat_adra-plus_original_lora_h200_8.sh"),
        _pair(f"{PT}/tulu3-wildchat/run_mia_tulu3-wildchat_adra-plus_rl_eval_full.sh",
              f"{PT}/tulu3-wildchat/run_mia_tulu3-wildchat_adra-plus_rl_eval_full.sh"),
        f"{PT}/tulu3-wildchat/run_mia_tulu3-wildchat_n-sampling_eval.sh",
        f"{PT}/tulu3-wildchat/run_mia_tulu3-wildchat_baselines.sh",
        notes={"adra": "the release has no ADRA evaluation script for WildChat: its ADRA+ script's"}),
    "bookmia": Scripts(
        "pre", _pair(f"{PRE}/bookmia/prepare_bookmia_mia_data_lexical_adra.sh",
                     f"{PRE}/bookmia/prepare_bookmia_mia_data_lexical_adra-plus.sh"),
        _pair(f"{PRE}/bookmia/submit_run_bookmia_adra_original_lora_h200_8.sh",
              f"{PRE}/bookmia/submit_run_bookmia_adra-plus_original_lora_h200_8.sh"),
        _pair(f"{PRE}/bookmia/run_mia_bookmia_adra_rl_eval_full.sh",
              f"{PRE}/bookmia/run_mia_bookmia_adra_rl_eval_full.sh"),
        f"{PRE}/bookmia/run_mia_bookmia_n-sampling_eval.sh", f"{PRE}/bookmia/run_mia_bookmia_baselines.sh",
        notes={"adra_plus": "the release has no ADRA+ evaluation script for BookMIA: its ADRA script's"}),
    "bookmia_paraphrased": Scripts(
        "pre", _pair(f"{PRE}/bookmia/prepare_bookmia_paraphrased_mia_data_lexical_adra.sh",
                     f"{PRE}/bookmia/prepare_bookmia_paraphrased_mia_data_lexical_adra-plus.sh"),
        _pair(f"{PRE}/bookmia/submit_run_bookmia_paraphrased_adra_original_lora_h200_8.sh",
              f"{PRE}/bookmia/submit_run_bookmia_paraphrased_adra-plus_original_lora_h200_8.sh"),
        _pair(f"{PRE}/bookmia/run_mia_bookmia_paraphrased_adra_rl_eval_full.sh",
              f"{PRE}/bookmia/run_mia_bookmia_paraphrased_adra_rl_eval_full.sh"),
        f"{PRE}/bookmia/run_mia_bookmia_paraphrased_n-sampling_eval.sh.sh",
        f"{PRE}/bookmia/run_mia_bookmia_paraphrased_baselines.sh",
        notes={"adra_plus": "the release has no paraphrased BookMIA ADRA+ evaluation script: its ADRA script's"}),
    "wikimia_24_hard": Scripts(
        "pre", _pair(f"{PRE}/wikimia-2024-hard/prepare_wikimia24_hard_mia_data_lexical_adra.sh",
                     f"{PRE}/wikimia-2024-hard/prepare_wikimia24_hard_mia_data_lexical_adra-plus.sh"),
        _pair(f"{PRE}/wikimia-2024-hard/submit_run_wikimia24_hard_original_adra-plus_original_lora_h200_8.sh",
              f"{PRE}/wikimia-2024-hard/submit_run_wikimia24_hard_original_adra-plus_original_lora_h200_8.sh"),
        _pair(f"{PRE}/wikimia-2024-hard/run_mia_wikimia24_hard_adra_rl_eval_full.sh",
              f"{PRE}/wikimia-2024-hard/run_mia_wikimia24_hard_adra_rl_eval_full.sh"),
        f"{PRE}/wikimia-2024-hard/run_mia_wikimia24-hard_n-sampling_eval.sh",
        f"{PRE}/wikimia-2024-hard/run_mia_wiki24-hard_baselines.sh",
        notes={"adra": "the release has no ADRA launch for WikiMIA-24 Hard: its ADRA+ launch (the same verl "
                       "arguments)"}),
    "wikimia_24_hard_paraphrased": Scripts(
        "pre", _pair(f"{PRE}/wikimia-2024-hard/prepare_wikimia24_hard_paraphrased_mia_data_lexical_adra.sh",
                     f"{PRE}/wikimia-2024-hard/prepare_wikimia24_hard_paraphrased_mia_data_lexical_adra-plus.sh.sh"),
        _pair(f"{PRE}/wikimia-2024-hard/submit_run_wikimia24_hard_paraphrased_adra-plus_paraphrased_lora_h200_8.sh",
              f"{PRE}/wikimia-2024-hard/submit_run_wikimia24_hard_paraphrased_adra-plus_paraphrased_lora_h200_8.sh"),
        _pair(f"{PRE}/wikimia-2024-hard/run_mia_wikimia24_hard_paraphrased_adra_rl_eval_full.sh",
              f"{PRE}/wikimia-2024-hard/run_mia_wikimia24_hard_paraphrased_adra_rl_eval_full.sh"),
        f"{PRE}/wikimia-2024-hard/run_mia_wikimia24-hard_paraphrased_n-sampling_eval.sh",
        f"{PRE}/wikimia-2024-hard/run_mia_wiki24-hard_paraphrased_baselines.sh",
        notes={"adra": "the release has no paraphrased WikiMIA-24 Hard ADRA launch: its ADRA+ launch"}),
    "dolma3_arxiv": Scripts(
        "pre", _pair(f"{PRE}/olmo3-arxiv/prepare_dolma3-arxiv_mia_data_lexical_adra.sh",
                     f"{PRE}/olmo3-arxiv/prepare_dolma3-arxiv_mia_data_lexical_adra-plus.sh"),
        _pair(f"{PRE}/olmo3-arxiv/submit_run_dolma3-arxiv_adra_original_lora_h200_8.sh",
              f"{PRE}/olmo3-arxiv/submit_run_dolma3-arxiv_adra-plus_original_lora_h200_8.sh"),
        _pair(f"{PRE}/olmo3-arxiv/run_mia_dolma3-arxiv_adra_rl_eval_full.sh",
              f"{PRE}/olmo3-arxiv/run_mia_dolma3-arxiv_adra_rl_eval_full.sh"),
        f"{PRE}/olmo3-arxiv/run_mia_dolma3-arxiv_n-sampling_eval.sh",
        f"{PRE}/olmo3-arxiv/run_mia_dolma3-arxiv_baselines.sh",
        notes={"adra_plus": "the release has no Dolma-3 ADRA+ evaluation script: its ADRA script's"}),
    "dolma3_arxiv_paraphrased": Scripts(
        "pre", _pair(f"{PRE}/olmo3-arxiv/prepare_dolma3-arxiv_paraphrased_mia_data_lexical_adra.sh",
                     f"{PRE}/olmo3-arxiv/prepare_dolma3-arxiv_paraphrased_mia_data_lexical_adra-plus.sh"),
        _pair(f"{PRE}/olmo3-arxiv/submit_run_dolma3-arxiv_paraphrased_adra_original_lora_h200_8.sh",
              f"{PRE}/olmo3-arxiv/submit_run_dolma3-arxiv_paraphrased_adra-plus_original_lora_h200_8.sh"),
        _pair(f"{PRE}/olmo3-arxiv/run_mia_dolma3-arxiv_paraphrased_adra_rl_eval_full.sh",
              f"{PRE}/olmo3-arxiv/run_mia_dolma3-arxiv_paraphrased_adra_rl_eval_full.sh"),
        f"{PRE}/olmo3-arxiv/run_mia_dolma3-arxiv_paraphrased_n-sampling_eval.sh",
        f"{PRE}/olmo3-arxiv/run_mia_dolma3-arxiv_paraphrased_baselines.sh",
        notes={"adra_plus": "the release has no paraphrased Dolma-3 ADRA+ evaluation script: its ADRA script's"}),
    "s1_1": Scripts(
        "s1", _pair(f"{DIST}/prepare_s1_deepseek-r1_mia_data_lexical_adra.sh", None),
        _pair(f"{DIST}/submit_run_s1_deepseek-r1_adra_original_lora_h200_8.sh", None), _pair(None, None),
        f"{DIST}/run_mia_s1_deepseek-r1_n-sampling_eval.sh", f"{DIST}/run_mia_s1_deepseek-r1_baselines.sh",
        notes={"adra": "the release has no evaluation script of the S1 policies: the evaluation rows are not read"}),
    "s1": Scripts(
        "s1", _pair(f"{DIST}/prepare_s1_gemini_mia_data_lexical_adra.sh", None),
        _pair(f"{DIST}/submit_run_s1_gemini_adra_original_lora_h200_8.sh", None), _pair(None, None),
        f"{DIST}/run_mia_s1_gemini_n-sampling_eval.sh", f"{DIST}/run_mia_s1_gemini_baselines.sh",
        notes={"adra": "the release has no evaluation script of the S1 policies: the evaluation rows are not read"}),
}


@dataclass(frozen=True)
class Experiment:
    """An ADRA experiment of a paper config: its ``config``, target ``model`` and ``dataset``, ``variant`` and the
    key of :data:`SCRIPTS` (``scripts``) of the code's run; ``model_note``: why the code's model differs, if so."""

    config: str
    model: str
    dataset: str
    variant: str
    scripts: str

    @property
    def code(self) -> Scripts:
        return SCRIPTS[self.scripts]

    @property
    def rl_variant(self) -> str:
        """The variant whose data script and launch the experiment reads (the SFT ablation: ADRA's budget)."""
        return "adra" if self.variant == "adra_sft" else self.variant

    @property
    def notes(self) -> list[str]:
        note = self.code.notes.get(self.rl_variant)
        sft = ["the release has no script of the RL-vs-SFT ablation (Figure 2): the project gives it ADRA's budget "
               "(learning rate, steps, prompts per step, LoRA), read from ADRA's data script and launch"]
        return (sft if self.variant == "adra_sft" else []) + ([note] if note else [])


def _experiments() -> dict[str, Experiment]:
    rows = [("adra_aime", "tulu2_aime", "aime", ("adra", "adra_plus", "adra_sft"), "aime", "aime"),
            ("adra_aime_13b", "tulu2_13b_aime", "aime", ("adra", "adra_plus", "adra_sft"), "aime", "aime_13b"),
            ("adra_aime_paraphrased", "tulu2_aime_paraphrased", "aime_paraphrased", ("adra", "adra_plus"),
             "aime_paraphrased", "aime_paraphrased"),
            ("adra_olympiad", "tulu2_olympiad", "olympiad_math", ("adra", "adra_plus", "adra_sft"), "olympiad_math",
             "olympiad"),
            ("adra_olympiad_paraphrased", "tulu2_olympiad_paraphrased", "olympiad_math_paraphrased",
             ("adra", "adra_plus"), "olympiad_math_paraphrased", "olympiad_paraphrased"),
            ("adra_tulu3", "tulu3_8b", "aya", ("adra", "adra_plus"), "aya", "aya"),
            ("adra_tulu3", "tulu3_8b", "wildchat", ("adra", "adra_plus"), "wildchat", "wildchat"),
            ("adra_distillation", "qwen25_s1_1", "s1_1", ("adra",), "s1_1", "s1_1"),
            ("adra_distillation_s1", "qwen25_s1", "s1", ("adra",), "s1", "s1")]
    for dataset, model in (("bookmia", "llama2_7b"), ("wikimia_24_hard", "qwen2_7b"),
                           ("dolma3_arxiv", "olmo3_7b_instruct")):
        for suffix in ("", "_paraphrased"):
            rows.append(("adra_pretraining", model, dataset + suffix, ("adra", "adra_plus"), dataset + suffix,
                         dataset + suffix))
    return {f"{variant}_{tag}": Experiment(f"configs/paper/{config}.yaml", model, dataset, variant, scripts)
            for config, model, dataset, variants, scripts, tag in rows for variant in variants}


EXPERIMENTS: dict[str, Experiment] = _experiments()


# -- locators ---------------------------------------------------------------------------------------
def flag(path: str, name: str, many: bool = False) -> ShellValue:
    """``--name value`` of a command in a shell script (a script variable resolved; a commented-out line too: the
    mix scripts keep the command that built the released mix commented)."""
    return ShellValue(path, rf"^\s*#?\s*--{name}\s+(.+?)\s*\\?\s*$", many=many)


def has_flag(path: str, name: str) -> Find:
    """A ``--name`` switch given to a command (store_true)."""
    return Find(path, rf"^\s+(--{name})\s*\\?\s*$", raw=True)


def verl_arg(path: str, key: str) -> ShellValue:
    """``key=value`` of a verl launch (``python3 -m verl.trainer.main_ppo`` / ``main_generation``)."""
    return ShellValue(path, rf"^\s+{key.replace('.', '[.]')}=(\S+)")


def shell_var(path: str, name: str, raw: bool = False) -> ShellValue:
    """``NAME=value`` or ``NAME="value"`` of a shell script (``raw``: the string as written, spaces kept)."""
    return ShellValue(path, rf'^{name}=(\S.*?)\s*(?:#.*)?$', raw=raw)


def hydra(key: str) -> YamlKey:
    return YamlKey(PPO, key)


def profile(name: str) -> tuple[str, float | None, bool]:
    """(reward metric, length threshold tau, contrastive) of a lexical metric profile named as the data scripts
    name them (``unique_ngram_coverage_ref_ratio_1.50``, ``trio_v3_unique_ratio_penalty_2.0``, ``..._mia_adaptive_
    match_linear_distractor_max``); the profiles' arithmetic is the reward tests' (tests/test_reconstruction.py)."""
    metric = "ngram" if name.startswith("unique_ngram_coverage") else "trio" if name.startswith("trio") else name
    tau = next((float(p) for p in name.split("_") if p.replace(".", "", 1).isdigit() and "." in p), None)
    return metric, tau, "mia_adaptive_match" in name


def weight_column(tag: str, k: float) -> str:
    """The project's score column of a data script's ``mia_weights_tag`` (run_mia.py's attack, ``k`` its fraction)."""
    return {"min_k++": f"min_k_plus_plus@{k:g}", "min_k": f"min_k@{k:g}", "loss": "loss"}.get(tag, tag)


# -- the spec ---------------------------------------------------------------------------------------
N_A_MEMORY = "memory and speed only (the same arithmetic)"
LOGGING = "logging and file locations only"
N_A_EVAL_ONLY = "validation during training, off in the code (test_freq -1)"
N_A_NO_REWARD = "the SFT ablation has no reward: it trains on the targets"
N_A_NO_ROLLOUT = "the SFT ablation samples no rollouts"
LOSS_AGG = ("TRL's dapo here: the token mean over an update's completions on every GPU; verl's token-mean is each "
            "micro-batch's token mean (ppo_micro_batch_size_per_gpu completions) averaged over the micro-batches and "
            "GPUs, so a micro-batch of short completions weighs as much as one of long ones; which completions share "
            "a micro-batch follows verl's sequence-length-balanced order (trainer.balance_batch), which TRL does not "
            "reproduce")
KL_CLAMP = ("TRL's k3 estimator (exp(d) - d - 1 of the log-ratio to the reference), as verl's low_var_kl, which "
            "clamps it to [-10, 10]: a bound that binds only where the policy has left the reference far behind")
SPLIT_DRAW = ("each seed's split drawn by the project's sampler from the pool's members and non-members (three seeds); "
              "the code's one split: random.Random(subset_seed).sample of the member rows and subset_seed + 1 of the "
              "non-member rows (the same label rule, other rows)")
WHITESPACE = ("the pools whitespace-normalise each text (a solution's line breaks become spaces) before it is cut, "
              "rendered for the SFT and compared; the code keeps a solution's text as written (str.strip()): the "
              "reward and the metrics split on whitespace alike, the SFT texts and the prompts differ in their breaks")
PROMPT_FIT = ("a prompt longer than max_prompt_length loses its first prefix words until it fits (every candidate "
              "kept); the code drops such a prompt from the RL set (data.filter_overlong_prompts) and its evaluation "
              "cuts the prompt's end (main_generation's truncation=True)")
SEED = "the seed of an arbitrary draw (the order of the SFT examples): the same distribution"


def settings(name: str) -> list[Setting]:
    """Every setting of experiment ``name`` (:data:`EXPERIMENTS`), in the document's order."""
    e = EXPERIMENTS[name]
    c, v = e.code, e.rl_variant
    plus, sft = e.variant == "adra_plus", e.variant == "adra_sft"
    prep, submit, evaluate = c.prepare[v], c.submit[v], c.evaluate[v]
    pre = PREPROCESS[c.kind]
    stage = "adra_train"
    rows = data_settings(e, prep, pre, plus, sft)
    rows += launch_settings(e, submit, plus, sft)
    if c.mix:
        rows += mix_settings(e, c.mix)
    if c.kind == "s1":
        rows += s1_sft_settings(e)
    rows += eval_settings(e, evaluate, c.nsampling)
    rows += baseline_settings(e, c.baselines)
    rows += prompt_settings(stage)
    return rows


def data_settings(e: Experiment, prep: str, pre: str, plus: bool, sft: bool) -> list[Setting]:
    """The data script's arguments and the preprocessing script's defaults (the candidates, the prompt, the
    references)."""
    kind = e.code.kind
    reward = None if sft else "train.reward"
    rows = [
        Setting("data.dataset_path", "build_pool", flag(prep, "dataset_path"), "data.source",
                reason=("the code's paraphrases are Gemini-2.5-Flash's, read from the hub; a run here has no network: "
                        "an open instruct model on vLLM paraphrases the pool (datasets.<d>.paraphrase)")
                if e.dataset.endswith("_paraphrased") and kind == "pre" else None),
        Setting("data.subset_size", "build_split", flag(prep, "subset_size"), "data.n_per_class"),
        Setting("data.subset_seed", "build_split", flag(prep, "subset_seed"), "data.seeds",
                expect=lambda s: [s], reason=SPLIT_DRAW),
    ]
    if kind == "post" or kind == "s1":
        rows.append(Setting("data.dataset_split", "build_pool", flag(prep, "dataset_split"), "data.split"))
    if kind == "post":
        method = flag(prep, "mia_nonmember_method")
        rows.append(Setting("data.nonmember_method", "build_pool", method, "data.nonmembers",
                            expect=lambda m: {"unused_examples": "the pool's other rows",
                                              "separate_dataset": "a separate non-member set"}.get(m, m)))
        rows.append(Setting("data.line_breaks", "build_pool",
                            Find(pre, r'"solution": (str\(ex\["solution"\]\)\.strip\(\))', raw=True),
                            "data.line_breaks_kept", expect=lambda v: True, reason=WHITESPACE))
    if e.scripts.startswith("aime"):
        rows += [Setting("data.member_years", "build_pool", flag(prep, "member_years", many=True),
                         "data.member_years"),
                 Setting("data.nonmember_years", "build_pool", flag(prep, "nonmember_years", many=True),
                         "data.nonmember_years")]
    if kind == "pre":
        rows += [Setting("data.prefix_ratio", "build_pool", flag(prep, "prefix_ratio"), "data.prefix_ratio"),
                 Setting("data.custom_prompt", "n_sampling_rollouts", shell_var(prep, "CUSTOM_PROMPT", raw=True),
                         "data.template", expect=lambda v: v + "{prefix}",
                         test=T_ROUNDING + "test_split_words_floor_as_the_code_and_ceil_on_short_texts")]
    if kind != "s1":
        rows += [
            Setting("data.assistant_prefix_ratio", "adra_train", flag(prep, "assistant_prefix_ratio"),
                    "task.assistant_prefix_ratio"),
            Setting("data.assistant_prefix_words", "adra_train",
                    Find(pre, r"num_prefix_words = (max\(1, int\(len\(words\) \* [\w.]+\)\))", raw=True),
                    "task.assistant_prefix_min_words", expect=lambda v: 1,
                    test=T_ROUNDING + "test_assistant_prefix_min_words_one_as_the_code_zero_plain_floor"),
        ]
    if sft:
        return rows
    rows += [
        Setting("data.lexical_metric_profile", "adra_train", flag(prep, "lexical_metric_profile"), "train.reward_rule",
                expect=lambda p: dict(zip(("metric", "tau", "contrastive"), profile(p)))),
        Setting("data.include_target_gt", "adra_train", has_flag(prep, "include_target_gt"), "train.reward_reference",
                expect=lambda v: "suffix",
                test=T_ADRA + "test_the_reward_compares_with_the_whole_suffix_given_words_included_as_the_codes_"
                                  "target_gt"),
    ]
    if kind != "s1":
        count = "train.contrastive.distractors" if plus else "train.random_suffixes"
        rows += [Setting("data.augment_num_samples", "adra_train", flag(prep, "augment_num_samples"), count),
                 Setting("data.augment_sampling_method", "adra_train", flag(prep, "augment_sampling_method"),
                         "train.reference_draw",
                         expect=lambda m: {"random": "distinct others, seeded",
                                           "perturbed": "the paired article first, then distinct others"}.get(m, m))]
    if plus:
        rows += [Setting("data.mia_weights_tag", "adra_train",
                         Derived(lambda tag, k, kpp: weight_column(tag, kpp if tag == "min_k++" else k),
                                 (shell_var(prep, "mia_weight_tag"), argparse_default(RUN_MIA, "--min-k"),
                                  argparse_default(RUN_MIA, "--minkpp-k"))), "train.contrastive.baseline")]
    return rows


BUDGET = {"actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.model.lora_rank", "actor_rollout_ref.model.lora_alpha",
          "data.train_batch_size", "actor_rollout_ref.actor.ppo_mini_batch_size", "trainer.total_epochs",
          "trainer.save_freq", "data.max_prompt_length", "data.max_response_length"}


def launch_settings(e: Experiment, submit: str, plus: bool, sft: bool) -> list[Setting]:
    """The RL launch: every verl argument of the submit script and the Hydra defaults it falls back on."""
    kind = e.code.kind
    na = lambda key, locate, why: Setting(f"rl.{key}", "adra_train", locate, None, reason=why)  # noqa: E731
    swapped = name_of(e) == "adra_plus_dolma3_arxiv_paraphrased"
    one_run = e.dataset == "olympiad_math_paraphrased" and e.variant == "adra"
    steps_reason = ("adra.train is one per config: the paraphrased Olympiad config trains both variants 100 steps, its "
                    "ADRA+ launch's; the code's ADRA reads the original Olympiad launch (60)") if one_run else None
    rows = [
        Setting("rl.algorithm.adv_estimator", "adra_train", verl_arg(submit, "algorithm.adv_estimator"),
                "constants.adv_estimator"),
        Setting("rl.algorithm.norm_adv_by_std_in_grpo", "adra_train", hydra("algorithm.norm_adv_by_std_in_grpo"),
                "train.settings.scale_rewards", expect=lambda v: "group" if v else "none"),
        Setting("rl.algorithm.use_kl_in_reward", "adra_train", verl_arg(submit, "algorithm.use_kl_in_reward"),
                "constants.kl_in_reward"),
        Setting("rl.data.train_batch_size", "adra_train", verl_arg(submit, "data.train_batch_size"),
                "grpo.rollout_prompts"),
        Setting("rl.data.max_prompt_length", "adra_train", verl_arg(submit, "data.max_prompt_length"),
                "train.settings.max_prompt_length", reason=ONE_TASK if swapped else None),
        Setting("rl.data.max_response_length", "adra_train",
                verl_arg(submit, "data.max_response_length"), "train.settings.max_completion_length",
                reason=ONE_TASK if swapped else None),
        Setting("rl.data.filter_overlong_prompts", "adra_train", verl_arg(submit, "data.filter_overlong_prompts"),
                "constants.overlong_prompts", expect=lambda v: "dropped" if v else "error", reason=PROMPT_FIT),
        Setting("rl.data.shuffle", "adra_train", hydra("data.shuffle"), "constants.shuffle"),
        Setting("rl.data.seed", "adra_train", Find(MAIN_PPO, r'data_config\.get\("seed", (\d+)\)'),
                "constants.order_seed",
                reason=("the prompt order is a seeded permutation per epoch either way (here the run's seed, "
                        "adra.seed and the evaluation seed); verl's dataloader generator is seeded 1")),
        Setting("rl.data.drop_last", "adra_train", Find(TRAINER, r"drop_last=(\w+),"), "constants.drop_last"),
        Setting("rl.data.assistant_prefix_key", "adra_train", verl_arg(submit, "data.assistant_prefix_key"),
                "constants.assistant_prefix", expect=lambda v: bool(v)) if kind != "s1" else None,
        *(Setting(f"rl.{name}", "adra_train", locate, key) for name, locate, key in (
            ("actor.optim.lr", verl_arg(submit, "actor_rollout_ref.actor.optim.lr"), "train.settings.lr"),
            ("actor.optim.warmup", hydra("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio"),
             "train.settings.warmup_steps"),
            ("actor.optim.warmup_style", hydra("actor_rollout_ref.actor.optim.warmup_style"),
             "train.settings.lr_scheduler"),
            ("actor.optim.weight_decay", hydra("actor_rollout_ref.actor.optim.weight_decay"),
             "train.settings.weight_decay"),
            ("actor.grad_clip", hydra("actor_rollout_ref.actor.grad_clip"), "train.settings.grad_clip"),
            ("actor.clip_ratio", hydra("actor_rollout_ref.actor.clip_ratio"), "train.settings.epsilon"),
            ("actor.ppo_epochs", hydra("actor_rollout_ref.actor.ppo_epochs"), "train.settings.num_iterations"),
            ("actor.ppo_mini_batch_size", verl_arg(submit, "actor_rollout_ref.actor.ppo_mini_batch_size"),
             "grpo.update_prompts"))),
        Setting("rl.actor.loss_agg_mode", "adra_train", hydra("actor_rollout_ref.actor.loss_agg_mode"),
                "train.settings.loss_type", expect=lambda v: {"token-mean": "bnpo"}.get(v, v), reason=LOSS_AGG),
        *(Setting(f"rl.{name}", "adra_train", verl_arg(submit, f"actor_rollout_ref.{name}"), key)
          for name, key in (("actor.entropy_coeff", "train.settings.entropy_coeff"),
                            ("actor.use_kl_loss", "constants.kl_loss"),
                            ("actor.kl_loss_coef", "train.settings.beta"))),
        Setting("rl.actor.kl_loss_type", "adra_train", verl_arg(submit, "actor_rollout_ref.actor.kl_loss_type"),
                "constants.kl_estimator", expect=lambda v: {"low_var_kl": "k3, clamped to [-10, 10]"}.get(v, v),
                reason=KL_CLAMP),
        *(Setting(f"rl.{name}", "adra_train", verl_arg(submit, f"actor_rollout_ref.{name}"), key)
          for name, key in (("model.lora_rank", "train.settings.lora.r"),
                            ("model.lora_alpha", "train.settings.lora.lora_alpha"))),
        Setting("rl.model.target_modules", "adra_train", hydra("actor_rollout_ref.model.target_modules"),
                "train.settings.lora.target_modules"),
        Setting("rl.model.lora_dropout", "adra_train",
                Find(WORKERS, r'lora_config = (\{"task_type".*\})', raw=True), "train.settings.lora_dropout",
                expect=lambda v: 0.0),   # no lora_dropout given: peft's 0.0
        Setting("rl.model.enable_gradient_checkpointing", "adra_train",
                verl_arg(submit, "actor_rollout_ref.model.enable_gradient_checkpointing"),
                "train.settings.activation_checkpointing"),
        Setting("rl.model.path", "adra_train", verl_arg(submit, "actor_rollout_ref.model.path"),
                "model.path" if hub_target(e) else None,
                reason=None if hub_target(e) else
                ("the code attacks its released checkpoint; here the target is built by the config's own stages "
                 "(the SFT's rows below) or read from the hub as the config names it")),
        *(Setting(f"rl.{name}", "adra_train", verl_arg(submit, f"actor_rollout_ref.{name}"), key)
          for name, key in (("rollout.name", "constants.rollout_engine"),
                            ("rollout.n", "train.settings.num_generations"),
                            ("rollout.temperature", "train.settings.temperature"),
                            ("rollout.top_p", "train.settings.top_p"))),
        Setting("rl.rollout.top_k", "adra_train", verl_arg(submit, "actor_rollout_ref.rollout.top_k"),
                "train.settings.top_k", expect=lambda k: 0 if k == -1 else k,
                reason=("ADRA's rollouts sample as N-Sampling (n_sampling.sampling): top-k 50, the code's S1 "
                        "N-Sampling script's; its S1 launch samples without a top-k cut") if kind == "s1" else None),
        Setting("rl.trainer.n_gpus_per_node", "adra_train", verl_arg(submit, "trainer.n_gpus_per_node"), "grpo.world"),
        Setting("rl.trainer.total_epochs", "adra_train", verl_arg(submit, "trainer.total_epochs"), "grpo.epochs",
                reason=steps_reason, test="tests/test_adra_workflow.py::test_one_epoch_over_each_seeds_candidates"),
        Setting("rl.trainer.steps", "adra_train",
                Derived(lambda epochs, batch, size: epochs * (size * (1 if kind == "s1" else 2) // batch),
                        (verl_arg(submit, "trainer.total_epochs"), verl_arg(submit, "data.train_batch_size"),
                         flag(e.code.prepare[e.rl_variant], "subset_size"))), "train.settings.max_steps",
                reason=steps_reason),
        Setting("rl.trainer.save_freq", "adra_train", verl_arg(submit, "trainer.save_freq"),
                "train.settings.save_steps",
                reason=("adra.train is one per config: checkpoints every 5 steps, the BookMIA and WikiMIA-24 Hard "
                        "launches'; the Dolma-3 launch saves every 10 (which policies can be evaluated: nothing "
                        "trained changes)") if e.dataset.startswith("dolma3") else None),
        Setting("rl.trainer.balance_batch", "adra_train", hydra("trainer.balance_batch"), None,
                reason="which completions share a micro-batch: the loss aggregation row (rl.actor.loss_agg_mode)"),
        na("actor.ppo_micro_batch_size_per_gpu",
           verl_arg(submit, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"),
           "memory only, but for the loss aggregation's micro-batches (rl.actor.loss_agg_mode)"),
        na("actor.clip_ratio_c", hydra("actor_rollout_ref.actor.clip_ratio_c"),
           "dual-clip for negative advantages: one update per rollout batch on the policy that sampled it "
           "(rl.actor.ppo_epochs 1, a mini-batch the whole batch) keeps the ratio at 1, where no clip binds"),
        na("actor.shuffle", hydra("actor_rollout_ref.actor.shuffle"),
           "one mini-batch per rollout batch: its order changes nothing"),
        na("reward_model.reward_manager", verl_arg(submit, "reward_model.reward_manager"),
           "how the rewards of a batch are computed together: speed only (the reward kernel scores a batch at once)"),
        na("reward_model.truncate_prefix_ratio", verl_arg(submit, "reward_model.reward_kwargs.truncate_prefix_ratio"),
           "cuts the ground truth, which the reward reads only where a row has no target_gt: every data script writes "
           "one (data.include_target_gt), so the reward compares with the whole target (lexical.py _filter_refs)")
        if kind != "s1" else None,
        na("data.truncation", verl_arg(submit, "data.truncation"), "overlong prompts are filtered first "
           "(rl.data.filter_overlong_prompts)"),
        na("model.use_remove_padding", verl_arg(submit, "actor_rollout_ref.model.use_remove_padding"), N_A_MEMORY),
        na("actor.fsdp_config.param_offload", verl_arg(submit, "actor_rollout_ref.actor.fsdp_config.param_offload"),
           N_A_MEMORY),
        na("actor.fsdp_config.optimizer_offload",
           verl_arg(submit, "actor_rollout_ref.actor.fsdp_config.optimizer_offload"), N_A_MEMORY),
        na("rollout.log_prob_micro_batch_size_per_gpu",
           verl_arg(submit, "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"), N_A_MEMORY),
        na("rollout.tensor_model_parallel_size",
           verl_arg(submit, "actor_rollout_ref.rollout.tensor_model_parallel_size"), N_A_MEMORY),
        na("rollout.gpu_memory_utilization", verl_arg(submit, "actor_rollout_ref.rollout.gpu_memory_utilization"),
           N_A_MEMORY),
        na("ref.log_prob_micro_batch_size_per_gpu",
           verl_arg(submit, "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"), N_A_MEMORY),
        na("ref.fsdp_config.param_offload", verl_arg(submit, "actor_rollout_ref.ref.fsdp_config.param_offload"),
           N_A_MEMORY),
        na("trainer.critic_warmup", verl_arg(submit, "trainer.critic_warmup"), "GRPO has no critic to warm up"),
        na("trainer.test_freq", verl_arg(submit, "trainer.test_freq"), N_A_EVAL_ONLY),
        na("trainer.nnodes", verl_arg(submit, "trainer.nnodes"), "one node either way (rl.trainer.n_gpus_per_node)"),
        na("trainer.logger", verl_arg(submit, "trainer.logger"), LOGGING),
        na("trainer.rollout_data_dir", verl_arg(submit, "trainer.rollout_data_dir"), LOGGING),
        na("ray_init.num_cpus", verl_arg(submit, "ray_init.num_cpus"), N_A_MEMORY),
    ]
    if profile_metric(e) == "ngram" and not sft:
        rows.append(Setting("rl.reward.dynamic_max_ngram", "adra_train",
                            Find(submit, r"^(#?\s*export ADRA_USE_DYNAMIC_MAX_NGRAM=\w+)", raw=True),
                            "train.reward.ngram_range",
                            expect=lambda line: "fixed" if line.startswith("#") else "dynamic",
                            test=T_RECON + "test_reward_ngram_range_code_dynamic_fixed_and_paper_lcs"))
    rows = [r for r in rows if r is not None]
    if sft:   # the ablation: ADRA's budget only
        keep = {f"rl.{k.split('.', 1)[1] if k.startswith('actor_rollout_ref.') else k}" for k in BUDGET}
        keep |= {"rl.trainer.steps", "rl.trainer.n_gpus_per_node", "rl.data.assistant_prefix_key",
                 "rl.model.path", "rl.trainer.total_epochs", "rl.actor.optim.weight_decay",
                 "rl.actor.optim.warmup_style", "rl.actor.optim.warmup", "rl.actor.grad_clip",
                 "rl.model.target_modules", "rl.model.lora_dropout", "rl.model.enable_gradient_checkpointing"}
        rows = [r for r in rows if r.name in keep]
    return rows


def hub_target(e: Experiment) -> bool:
    """Whether the experiment attacks a hub model (the code's launch names the same one), not one the config trains."""
    return paper_config(e.config)["models"][e.model]["kind"] == "hf"


ONE_TASK = ("one task per dataset (n_sampling.tasks): the paraphrased Dolma-3 task has its ADRA launch's and "
            "evaluation's 2,048 / 1,024 prompt / response tokens; its ADRA+ launch has 1,024 / 2,048")


def name_of(e: Experiment) -> str:
    return next(n for n, x in EXPERIMENTS.items() if x == e)


def profile_metric(e: Experiment) -> str:
    """The reward metric the paper config gives the experiment (which launch rows apply)."""
    from mialab.adra.plan import ADRAPlan
    from mialab.n_sampling.plan import NSamplingPlan
    from mialab.pipeline.plan import Plan

    config = paper_config(e.config)
    plan = ADRAPlan(NSamplingPlan(Plan(config), config), config).dataset_settings(e.dataset)
    return plan["plus_reward" if e.variant == "adra_plus" else "reward"]["metric"]


def mix_settings(e: Experiment, mix: str) -> list[Setting]:
    """The contamination SFT: data_mixer.py's draws and produce_checkpoint_trl_mixed_dataset.py's training."""
    st = "sft_contaminate"
    aime = e.scripts.startswith("aime")
    rows = [
        Setting("sft.contamination_dataset_name", st, flag(mix, "contamination_dataset_name"), "sft.members_source",
                reason=("the mix's upload (osieosie/...) is not released; the pool's source, the authors' ADRA-RL set "
                        "of the same problems (its paraphrases: the pool's, paraphrased here), is drawn from")),
        Setting("sft.contamination_size", st, flag(mix, "contamination_size"), "sft.draw.members",
                test=T_SFT + "test_a_draw_fine_tunes_on_the_mixers_members_and_filler_rows_only"),
        Setting("sft.contamination_seed", st, flag(mix, "contamination_seed"), "sft.draw.member_seed",
                test=T_SFT + "test_the_mixer_draw_is_the_released_data_mixers_sample_of_positions_sorted"),
        Setting("sft.contamination_rows", st,
                Find(MIXER, r"(rng\.sample\(range\(len\(ds\)\), subset_size\))", raw=True,
                     after=r"def process_aime_contamination" if aime else r"def process_olympiads_contamination"),
                "sft.members_drawn_from",
                expect=lambda v: "the pool's members" if aime else "every row of the dataset",
                reason=None if aime else
                ("the mixer draws its 32 from every row of its upload and the data script labels as members "
                 "another draw (random.Random(subset_seed 1)) of another upload (ADRA-RL/Olympiads-Cleaned): which "
                 "SFT rows the evaluation calls members cannot be told offline; here the draw is over the pool's "
                 "members, so every fine-tuned problem is a labelled member")),
        Setting("sft.general_dataset", st, flag(mix, "general_dataset"), "sft.filler_source",
                expect=lambda g: {"tulu3_sft": "allenai/tulu-3-sft-mixture", "tulu2_sft": "allenai/tulu-v2-sft-mixture"}
                .get(g, g)),
        Setting("sft.general_seed", st, flag(mix, "general_seed"), "sft.draw.filler_seed"),
        Setting("sft.contamination_percentage", st, flag(mix, "contamination_percentage"), "sft.contamination_rate",
                expect=lambda p: p / 100),
        Setting("sft.general_rendering", st, Find(MIXER, r"(messages = ex\[\"messages\"\])",
                                                  after=r"def process_tulu3_sft_general", raw=True),
                "sft.filler_columns", expect=lambda v: ["messages"]),
        Setting("sft.member_rendering", st, Find(MIXER, r'(\{"role": "assistant", "content": str\(ex\["solution"\]\)'
                                                         r'\.strip\(\)\})', raw=True), "sft.format",
                expect=lambda v: "chat",
                test=T_SFT + "test_chat_members_are_the_templated_prefix_suffix_pairs_of_the_members_only"),
        Setting("sft.tokenizer_name", st, argparse_default(MIXER, "--tokenizer_name"), "sft.template_model",
                reason=("the init model's chat template renders the mix (the 13B Tulu-2's is the 7B's, token for "
                        "token); the code's mixer renders with allenai/tulu-2-7b")
                if "13b" in e.model else None),
        Setting("sft.mix_seed", st, argparse_default(MIXER, "--mix_seed"), None,
                reason="the order the mix is stored in: the SFT's sampler shuffles the examples (sft.seed)"),
        Setting("sft.model_name", st, flag(mix, "model_name"), "sft.init_path",
                reason=("Table 9's 13B: the code's mix and SFT scripts name the 7B; the project fine-tunes Tulu-2-13B "
                        "with the 7B's settings") if "13b" in e.model else None),
        Setting("sft.batch_size", st, flag(mix, "batch_size"), "sft.train.micro_batch_size"),
        Setting("sft.effective_batch_size", st, flag(mix, "effective_batch_size"), "sft.train.effective_batch_size"),
        Setting("sft.num_epochs", st, flag(mix, "num_epochs"), "sft.train.epochs"),
        Setting("sft.learning_rate", st, flag(mix, "learning_rate"), "sft.train.lr"),
        Setting("sft.lr_scheduler_type", st, flag(mix, "lr_scheduler_type"), "sft.train.schedule",
                test=T_SFT + "test_the_constant_schedule_keeps_the_rate_after_the_warmup"),
        Setting("sft.warmup_steps", st, flag(mix, "warmup_steps"), "sft.train.warmup"),
        Setting("sft.bf16", st, has_flag(mix, "bf16"), "sft.train.precision", expect=lambda v: "bf16"),
        Setting("sft.max_seq_length", st, flag(mix, "max_seq_length"), "sft.train.max_length",
                reason=("Tulu-2's context is 4,096 positions: 8,192 would train past it (cluster_checks refuses); the "
                        "AIME members are far shorter, a Tulu-3 mix row over 4,096 tokens is cut there")
                if aime else None),
        Setting("sft.weight_decay", st, Find(CHECKPOINTS, r"(training_args = SFTConfig\()", raw=True),
                "sft.train.weight_decay", expect=lambda v: 0.0),
        Setting("sft.seed", st, Find(CHECKPOINTS, r"^\s+seed: int = (\d+)"), None, reason=SEED),
        Setting("sft.packing", st, Find(SFT_TRAIN, r"packing=(\w+),"), "constants.sft_packing"),
        Setting("sft.loss_tokens", st, Find(CHECKPOINTS, r'(dataset_text_field="text")', raw=True),
                "constants.sft_loss_tokens", expect=lambda v: "every token"),
        Setting("sft.last_step", st, Find(SFT_TRAIN, r"(steps_per_epoch = math\.ceil\(len\(dataset\) / batch_size\))",
                                          raw=True), "constants.sft_last_step",
                expect=lambda v: "a partial last step",
                reason=("an epoch's last optimizer step is filled from the start of the epoch's order (160 examples at "
                        "64: 32 seen twice); TRL's last step takes the 32 left")),
        Setting("sft.gradient_checkpointing", st, Find(SFT_TRAIN, r"(gradient_checkpointing=not args\.no_gradient_"
                                                             r"checkpointing)", raw=True), None, reason=N_A_MEMORY),
    ]
    if aime:
        rows.append(Setting("sft.year_filter", st, flag(mix, "year_filter", many=True), "data.member_years"))
    return rows


def s1_sft_settings(e: Experiment) -> list[Setting]:
    st = "sft_contaminate"
    return [
        Setting("sft.learning_rate", st, Find(S1_SFT, r"learning_rate: float = ([\de.-]+)"), "sft.train.lr"),
        Setting("sft.lr_scheduler_type", st, Find(S1_SFT, r'lr_scheduler_type="(\w+)"'), "sft.train.schedule"),
        Setting("sft.warmup_steps", st, Find(S1_SFT, r"warmup_steps = (\d+)"), "sft.train.warmup"),
        Setting("sft.target", st, Find(S1_SFT, r'"content": str\(ex\["(\w+_attempt)"\]\)',
                                       after=r"def load_s1k_subset_deepseek_r1" if e.dataset == "s1_1"
                                       else r"def load_s1k_subset_gemini"), "sft.filler_columns",
                expect=lambda col: ["question", col],
                test="tests/test_families.py::test_s1_target_is_the_attempt_only_by_default_as_the_code"),
    ]


def eval_settings(e: Experiment, evaluate: str | None, nsampling: str) -> list[Setting]:
    """The policies' evaluation (``adra_eval``) and N-Sampling's (``n_sampling_rollouts``)."""
    rows = []
    if evaluate:
        rows += [
            Setting("eval.temperature", "adra_eval", shell_var(evaluate, "temperature"), "eval.temperature"),
            Setting("eval.top_p", "adra_eval", shell_var(evaluate, "top_p"), "eval.top_p"),
            Setting("eval.top_k", "adra_eval", shell_var(evaluate, "top_k"), "eval.top_k"),
            Setting("eval.n_samples", "adra_eval", shell_var(evaluate, "n_samples"), "eval.n",
                    reason=("N-Sampling's N here (adra.eval has no N of its own): 16 in the code's Olympiad and "
                            "WildChat ADRA+ evaluation scripts, 32 in their launches, N-Sampling and the paper (D.3: "
                            "the RL budget)") if e.scripts.startswith(("olympiad", "wildchat")) else None),
            Setting("eval.prompt_length", "adra_eval", shell_var(evaluate, "PROMPT_LENGTH"), "task.max_prompt_tokens"),
            Setting("eval.response_length", "adra_eval", shell_var(evaluate, "RESPONSE_LENGTH"),
                    "task.max_new_tokens"),
            Setting("eval.steps", "adra_eval", Find(evaluate, r"^for global_step in ([\d ]+); do", raw=True),
                    "eval.steps", expect=lambda steps: [int(s) for s in steps.split()],
                    reason=("the policies evaluated: here adra.eval.steps and the final one (the results table reads "
                            "the final); the code's loop evaluates every saved step")),
            Setting("eval.prefix_ratio", "adra_eval", ShellValue(evaluate, r"--prefix-ratio (\S+)"),
                    "task.assistant_prefix_ratio"),
            Setting("eval.suffix_only_rounding", "adra_eval",
                    Find(EVALUATION, r"prefix_length = (int\(len\(words\) \* prefix_ratio\))", raw=True),
                    "metrics.min_words", expect=lambda v: 0,
                    reason=("the metrics leave out the words the prompt gave, max(1, floor(0.25 n)) (the task's rule); "
                            "the code's evaluation leaves out floor(0.25 n): they differ for a suffix under 4 words")),
            Setting("eval.embedding_model", "adra_eval", ShellValue(evaluate, r"--embedding-model (\S+)"),
                    "metrics.embedding_model", expect=lambda m: {"qwen3-8B": "Qwen/Qwen3-Embedding-8B"}.get(m, m)),
            Setting("eval.max_ngram", "adra_eval", Find(NGRAM, r"^DEFAULT_MAX_NGRAM = (\d+)"), "metrics.n_max",
                    test="tests/test_reconstruction.py::test_code_convention_metrics_positional_coverage_and_token_"
                         "count_overlap"),
            Setting("eval.merge_dtype", "adra_eval", ShellValue(evaluate, r"--dtype (\S+)"), None,
                    reason="the dtype the merged policy is stored in; the evaluation engine's dtype is the backend's"),
            Setting("eval.tensor_model_parallel_size", "adra_eval",
                    ShellValue(evaluate, r"rollout[.]tensor_model_parallel_size=(\S+)"), None, reason=N_A_MEMORY),
        ]
    rows += [
        Setting("nsampling.temperature", "n_sampling_rollouts", shell_var(nsampling, "temperature"),
                "nsampling.temperature"),
        Setting("nsampling.top_p", "n_sampling_rollouts", shell_var(nsampling, "top_p"), "nsampling.top_p"),
        Setting("nsampling.top_k", "n_sampling_rollouts", shell_var(nsampling, "top_k"), "nsampling.top_k"),
        Setting("nsampling.n_samples", "n_sampling_rollouts", shell_var(nsampling, "n_samples"), "nsampling.n"),
        Setting("nsampling.prompt_length", "n_sampling_rollouts", shell_var(nsampling, "PROMPT_LENGTH"),
                "task.max_prompt_tokens",
                reason=("one task per dataset: its prompt budget is the RL launch's (1,024 tokens); the code's "
                        "N-Sampling script gives BookMIA 512, cutting a longer prompt's end")
                if e.dataset == "bookmia" else None),
        Setting("nsampling.response_length", "n_sampling_rollouts", shell_var(nsampling, "RESPONSE_LENGTH"),
                "task.max_new_tokens"),
    ]
    return rows


def baseline_settings(e: Experiment, baselines: str) -> list[Setting]:
    st = "score_baselines"
    rows = [
        Setting("baselines.attacks", st,
                ShellArray(baselines, "ATTACKS") if e.code.kind == "pre" else
                Derived(lambda names, ref: [*names, ref], (ShellArray(baselines, "ATTACKS"),
                                                           Find(baselines, r"^\s+--attack (ref)\b"))),
                "scoring.methods", expect=project_methods),
        Setting("baselines.max_length", st, ShellValue(baselines, r"--max-length (\d+)"), "scoring.max_length"),
        Setting("baselines.min_k", st, argparse_default(RUN_MIA, "--min-k"), "scoring.k",
                expect=lambda k: [k]),
        Setting("baselines.text", st, Find(MIA_DATASETS, r"(text = tokenizer\.apply_chat_template\()", raw=True),
                "scoring.text", expect=lambda v: "chat",
                reason=("the passive baselines (and ADRA+'s membership weights) score each candidate's plain text "
                        "(prefix and suffix); the code's run_mia.py scores its (problem, solution) chat in the model's "
                        "chat template")),
    ]
    if e.code.kind != "pre":
        rows.append(Setting("baselines.reference_model", st, shell_var(baselines, "REF_MODEL"),
                            "scoring.reference_path",
                            reason=("Table 9's 13B: the code has no 13B baseline script (its AIME script names the 7B "
                                    "models); R-Loss calibrates with the 13B model before its SFT, as the 7B's")
                            if "13b" in e.model else None))
    return rows


def project_methods(names: list) -> list[str]:
    """The code's baselines (its ATTACKS, then ``ref`` where the script runs R-Loss) as ``scoring.methods`` orders
    them."""
    rename = {"ref": "r_loss", "min_k++": "min_k_plus_plus"}
    order = ["loss", "r_loss", "zlib", "min_k", "min_k_plus_plus"]
    return sorted({rename.get(n, n) for n in names}, key=order.index)


def prompt_settings(stage: str) -> list[Setting]:
    """How verl renders and tokenizes every prompt (training, evaluation, N-Sampling)."""
    return [
        Setting("prompt.chat_template", stage,
                Find(RL_DATASET, r"(raw_prompt = self\.tokenizer\.apply_chat_template\()", raw=True),
                "task.prompt_format", expect=lambda v: "verl",
                test=T_GEN + "test_verl_renders_through_the_chat_template_or_its_fallback_and_adds_no_special_token"),
        Setting("prompt.fallback_template", stage, FString(MAIN_PPO, "run", var="template_text"),
                "prompts.verl_fallback_template"),
        Setting("prompt.special_tokens", stage,
                Find(RL_DATASET, r"self\.tokenizer\(raw_prompt, return_tensors=\"pt\", add_special_tokens=(\w+)\)"),
                "constants.prompt_special_tokens",
                test="tests/test_rl.py::test_a_plain_prompt_is_tokenized_without_special_tokens_where_the_settings_"
                     "say_so_as_verl"),
        Setting("prompt.continue_final_message", stage,
                Find(RL_DATASET, r'template_kwargs = \{"add_generation_prompt": False, '
                                 r'"continue_final_message": (\w+)\}'),
                "constants.continue_final_message"),
    ]


# -- the project's side ----------------------------------------------------------------------------------
def paper_config(path: str) -> dict:
    """A paper config as the workflow reads it: validated against the schema, defaults filled in (a copy)."""
    return copy.deepcopy(_validated(path))


@functools.lru_cache(maxsize=None)
def _validated(path: str) -> dict:
    import yaml

    from mialab.pipeline.config import validate_config

    config = yaml.safe_load((REPO / path).read_text())
    validate_config(config)
    return config


def resolved_settings(config: dict, name: str) -> dict:
    """What the jobs of experiment ``name`` receive from ``config`` (validated, defaults filled): the split, the
    adra_train stage config and its GRPO arithmetic on the GPUs the job gets, the evaluation and N-Sampling rollout
    configs, the SFT entry, the scoring section, the prompt files and the project's constants."""
    from mialab.adra.plan import ADRAPlan
    from mialab.lm.prompts import verl_fallback_template
    from mialab.n_sampling.plan import NSamplingPlan
    from mialab.n_sampling.tasks import load_template
    from mialab.pipeline.plan import Plan
    from mialab.pipeline.sizing import Sizing
    from mialab.training.grpo import GRPOSettings, update_arithmetic

    e = EXPERIMENTS[name]
    plan = Plan(config)
    ns = NSamplingPlan(plan, config)
    adra = ADRAPlan(ns, config)
    seeds = plan.seeds()
    train = adra.train(e.model, e.dataset, e.variant, seeds[0]).manifest["config"]
    rollouts = adra.rollouts(e.model, e.dataset, seeds[0], f"{e.variant}-final").manifest["config"]
    nsampling = ns.rollout_run(e.model, e.dataset).manifest["config"]
    split = plan.split(e.dataset, seeds[0]).manifest["config"]
    pool = config["datasets"][e.dataset]["pool"]
    world = Sizing(config, environ={}).job("adra_train", model=e.model, dataset=e.dataset).gpus
    settings = GRPOSettings.from_config(train["settings"])
    arithmetic = update_arithmetic(settings, world)
    n_candidates = 2 * split["n_per_class"]
    rows = n_candidates // 2 if e.code.kind == "s1" else n_candidates
    epoch_steps = rows // arithmetic["rollout_prompts"] * arithmetic["updates_per_rollout"]
    spec = config["models"][e.model]
    sft = {}
    if spec["kind"] == "sft":
        init = config["models"][spec["init"]]
        member_pool = config["datasets"][spec["members"]["dataset"]]["pool"]
        sft = {**spec, "init_path": init["path"], "template_model": init["path"],
               "members_source": member_pool["source"].get("hub"),
               "members_drawn_from": "the pool's members",
               "filler_source": spec["filler"]["source"].get("hub"),
               "filler_columns": spec["filler"].get("columns"),
               "draw": spec.get("draw", {})}
    reward = train.get("reward", {})
    contrastive = train.get("contrastive", {})
    membership = pool.get("membership", {})
    years = lambda span: list(range(span[0], span[1] + 1)) if span else None  # noqa: E731
    scoring = config["scoring"]
    return {
        "data": {
            "source": pool["source"].get("hub"), "split": pool["source"].get("split"),
            "n_per_class": split["n_per_class"], "seeds": seeds,
            "nonmembers": ("a separate non-member set" if "nonmember_source" in pool else "the pool's other rows"),
            "line_breaks_kept": False,
            "member_years": years(membership.get("member_years")),
            "nonmember_years": years(membership.get("nonmember_years")),
            "prefix_ratio": pool.get("prefix_ratio"),
            "template": load_template(train["task"]["template"]),
        },
        "model": {"path": spec.get("path")},
        "task": {**train["task"], "prompt_format": train["prompt_format"]},
        "train": {
            **train,
            "reward_rule": {"metric": reward.get("metric"), "tau": reward.get("tau"),
                            "contrastive": e.variant == "adra_plus"},
            "reference_draw": ("the paired article first, then distinct others" if "pair_column" in pool
                               else "distinct others, seeded") if train.get("distractor_sampling") ==
                              "without_replacement" else train.get("distractor_sampling"),
            "contrastive": contrastive,
            "settings": {**dataclasses.asdict(settings),
                         "lora_dropout": (settings.lora or {}).get("lora_dropout", 0.0)},   # peft's default
        },
        "grpo": {"world": world, **arithmetic, "epochs": settings.max_steps // epoch_steps if epoch_steps else None},
        "eval": {**rollouts["sampling"], "steps": sorted({*adra.snapshot_steps(), settings.max_steps})},
        "nsampling": {**nsampling["sampling"][str(seeds[0])]},
        "metrics": {**ns.metrics_config(e.dataset),
                    "embedding_model": ns.spec["metrics"]["embedding_model"]},
        "sft": sft,
        "scoring": {"max_length": scoring["max_length"], "k": scoring["k"], "text": "plain",
                    "methods": scoring["methods"], "reference_path": reference_path(config, e.model)},
        "prompts": {"verl_fallback_template": verl_fallback_template()},
        "constants": {
            "adv_estimator": "grpo", "kl_in_reward": False, "overlong_prompts": "first prefix words dropped",
            "shuffle": True, "order_seed": "adra.seed with the evaluation seed", "drop_last": True,
            "assistant_prefix": train["task"]["assistant_prefix_ratio"] > 0,
            "kl_loss": settings.beta > 0, "kl_estimator": "k3",
            "rollout_engine": "vllm" if settings.vllm else "transformers",
            "prompt_special_tokens": train["prompt_format"] != "verl",   # adra.stages.train
            "continue_final_message": True,
            "sft_packing": False, "sft_loss_tokens": "every token", "sft_last_step": "the epoch's order wrapped",
        },
    }


def reference_path(config: dict, model: str) -> str | None:
    """The hub path of ``model``'s R-Loss reference (models.<model>.reference), None without one."""
    ref = config["models"][model].get("reference")
    return config["models"][ref]["path"] if ref else None


def experiment_header(name: str) -> dict:
    e = EXPERIMENTS[name]
    return {"experiment": name, "paper": PAPER, "config": e.config,
            "models": {"target": e.model, "dataset": e.dataset, "variant": e.variant},
            "released_code": dict(RELEASED), **({"notes": e.notes} if e.notes else {})}


def document_path(name: str) -> Path:
    return DOCS / f"{name}.yaml"


def configs() -> list[str]:
    return list(dict.fromkeys(e.config for e in EXPERIMENTS.values()))


def documents(checkout: Path | None = None) -> dict[str, dict]:
    """Every experiment's reference document: read from ``checkout`` (the released code) and the paper configs,
    or, without one, the committed documents with their project side refreshed from the configs."""
    from mialab.pipeline.fidelity import load, reference, refresh

    out = {}
    for name, e in EXPERIMENTS.items():
        resolved = resolved_settings(paper_config(e.config), name)
        out[name] = (refresh(load(document_path(name)), settings(name), resolved) if checkout is None
                     else reference(experiment_header(name), settings(name), checkout, resolved))
    return out
