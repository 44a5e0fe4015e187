"""LaRA's settings references (``docs/fidelity/lara_<model>.yaml``; the format: ``docs/fidelity/README.md``).

One experiment per model of ``configs/paper/lara_rl_models.yaml`` (the paper's Table 1): the released
checkpoint and its continued RL after 1 and 2 epochs, audited by LaRA and the output-level baselines. The
released code (github talzoomanzoo/rl-data-contamination-mj, read from a local checkout named by
``$LARA_CODE``, never copied) sets them in: the model's evaluation script
(``eval_scripts/<MODEL>/run_full_workflow_*.sh``: ``generate_full_data.py`` and ``evaluate_all_methods.py``
with ``detectors/rep_stiff.py`` and ``detectors/utils/*``), its evaluation set
(``benchmarks/<MODEL>/*_member.parquet``) and the RL launch (``RL_Contaminate/train_scripts/eurus_grpo.sh``,
the verl fork's Hydra defaults ``verl/mix_src/config/mix_ppo_trainer.yaml`` and its worker, actor and loss
code) with its corpora (``benchmarks/filtered_samples/*_rl_train_test/train.parquet``).

:func:`settings` is the spec of an experiment (every setting, its locator, its counterpart here and, where
the project differs on purpose, why); :func:`resolved_settings` is what the jobs of the paper config receive
(the plan's stage configs, the GRPO arithmetic on the GPUs a job gets, the prompt files, the code's
constants), built in-process from the config as written.
"""

from __future__ import annotations

import csv
import dataclasses
import inspect
from dataclasses import dataclass
from pathlib import Path

from mialab.core.paths import REPO
from mialab.pipeline.fidelity import Derived, Find, FString, Setting, Table, argparse_default

#: the environment variable naming a local checkout of the released code
CODE_ENV = "LARA_CODE"
RELEASED = {"repo": "talzoomanzoo/rl-data-contamination-mj"}
CONFIG = "configs/paper/lara_rl_models.yaml"
DOCS = REPO / "docs" / "fidelity"

GRPO = "RL_Contaminate/train_scripts/eurus_grpo.sh"
HYDRA = "RL_Contaminate/verl/verl/verl/mix_src/config/mix_ppo_trainer.yaml"
MIX = "RL_Contaminate/verl/verl/verl/mix_src"
REP_STIFF = "detectors/rep_stiff.py"
UTILS = "detectors/utils"
GENERATE = "generate_full_data.py"
EVALUATE = "evaluate_all_methods.py"
CORPUS = "benchmarks/filtered_samples/{}_rl_train_test/train.parquet"
ANSWER_LINE = "\n\nPresent the answer in LaTex format: \\boxed{Your answer}"
T_RL = "tests/test_rl.py::"
T_ENTROPY = ("tests/test_grpo_entropy.py::"
             "test_the_forks_loss_scales_trls_and_its_bonus_takes_each_micro_batchs_token_mean")


@dataclass(frozen=True)
class Experiment:
    """A LaRA experiment of the paper config: its target ``model`` and ``dataset``, its continued-RL checkpoints
    (``rl``), and where the released code keeps its evaluation (``folder``, ``script``, ``layers_var``), its
    evaluated RL checkpoints (``epoch_scripts``) and its RL corpus (``corpus``: None where not released)."""

    model: str
    dataset: str
    rl: tuple[str, str]
    folder: str
    script: str
    benchmark: str
    layers_var: str
    epoch_scripts: tuple[str, ...]
    corpus: str | None


EXPERIMENTS: dict[str, Experiment] = {
    "lara_eurus_prime": Experiment(
        "eurus_prime", "eurus_prime", ("eurus_prime_rl_e1", "eurus_prime_rl_e2"), "EURUS",
        "eval_scripts/EURUS/run_full_workflow_eurus.sh", "benchmarks/EURUS/eurus_member.parquet", "NUM_HIDDEN_LAYERS",
        tuple(f"eval_scripts/EURUS/run_full_workflow_eurus_epoch{i}.sh" for i in (0, 1)),
        None),
    "lara_limr": Experiment(
        "limr", "limr", ("limr_rl_e1", "limr_rl_e2"), "LIMR", "eval_scripts/LIMR/run_full_workflow_limr.sh",
        "benchmarks/LIMR/limr_member.parquet", "NUM_REP_STIFF_LAYERS",
        tuple(f"eval_scripts/LIMR/run_full_workflow_limr_epoch{i}.sh" for i in (0, 1)),
        CORPUS.format("limr")),
    "lara_olmo_rlzero": Experiment(
        "olmo_rlzero", "olmo_rlzero", ("olmo_rlzero_rl_e1", "olmo_rlzero_rl_e2"), "OLMOE",
        "eval_scripts/OLMOE/run_full_workflow_olmoe.sh", "benchmarks/OLMOE/olmoe_member.parquet", "NUM_HIDDEN_LAYERS",
        (), CORPUS.format("olmoe")),
}


# -- locators ---------------------------------------------------------------------------------------
def shell_var(path: str, name: str) -> Find:
    """``NAME=value``, ``NAME="value"`` or ``NAME="${NAME:-value}"`` in a shell script."""
    return Find(path, rf'^{name}=(?:"\$\{{{name}:-([^}}]*)\}}"|"([^"]*)"|(\S+))')


def shell_arg(key: str) -> Find:
    """``key=value`` of the verl launch in eurus_grpo.sh."""
    return Find(GRPO, rf"^\s+{key.replace('.', r'[.]')}=(\S+)")


def ref_arg(key: str) -> Find:
    """``actor_rollout_ref.key=value`` of the verl launch (the actor, its rollout and its reference)."""
    return shell_arg(f"actor_rollout_ref.{key}")


def hydra(section: str, key: str, indent: int = 4) -> Find:
    """The verl fork's Hydra default of ``key`` under top-level ``section`` (mix_ppo_trainer.yaml)."""
    return Find(HYDRA, rf"^{' ' * indent}{key}: (\S+)", after=rf"^{section}:" if indent == 2 else rf"^\s+{section}:")


def literal(path: str, function: str, pattern: str) -> Find:
    """A literal in the body of ``function`` of a Python file."""
    return Find(path, pattern, after=rf"def {function}\(")


def output_dir(script: str) -> Find:
    """The perturbation output folder a run script gives ``evaluate_all_methods.py`` (``--rep_stiff_output_dir``)."""
    return Find(script, r'(?:REP_STIFF_OUTPUT_DIR_BASENAME="|--rep_stiff_output_dir "\$\{ROOT\}/)'
                        r'(rep_stiff_outputs_[A-Za-z0-9_]+)', raw=True)


def member_rows(frame):
    return frame[frame["member"] == 1]


def user_turns(frame):
    return frame["prompt"].map(lambda chat: chat[-1]["content"])


def ends_with_answer_line(frame) -> str:
    """The answer-format line every user turn ends with (the empty string where they do not all end with it)."""
    return ANSWER_LINE if user_turns(frame).str.endswith(ANSWER_LINE).all() else ""


def one_system_turn(frame) -> str:
    """The system turn the rows share (an error where they differ)."""
    turns = set(frame["prompt"].map(lambda chat: chat[0]["content"] if chat[0]["role"] == "system" else ""))
    if len(turns) != 1:
        raise ValueError(f"{len(turns)} different system turns")
    return turns.pop()


# -- the spec ---------------------------------------------------------------------------------------------
N_A_VALIDATION = "validation only (no effect on the trained weights); the project validates nothing during RL"
N_A_MEMORY = "memory and speed only (same arithmetic)"
CHECKPOINT_FILES = "where and how many checkpoint files are kept: nothing trained"
LOGGING = "logging only (no effect on training)"
OTHER_SCORES = "a score of the code's other combined variants (rep_stiff_combined_*), not LaRA's"
N_A_PREFIX = ("LUFFY's off-policy prefix, off in the code (max_prefix_ratio 0: no prefix token, every completion "
              "on-policy), absent here")


def settings(name: str) -> list[Setting]:
    """Every setting of experiment ``name`` (:data:`EXPERIMENTS`), in the document's order."""
    e = EXPERIMENTS[name]
    script, bench = e.script, e.benchmark
    corpus = e.corpus or CORPUS.format("limr")
    corpus_note = ("; Eurus's own corpus (eurus_grpo.sh:43, eurus_mia_train_1k.parquet) is not released: the fillers "
                   "every released corpus shares" if e.corpus is None else "")
    rows = [
        # -- the evaluation set (build_pool / build_split) -------------------------------------------------
        Setting("data.members", "build_split",
                Table(bench, lambda f: int((f["member"] == 1).sum()), "member == 1 rows"), "split.n_per_class"),
        Setting("data.nonmember_rows", "build_split", Table(bench, lambda f: int((f["member"] == 0).sum()),
                                                             "member == 0 rows"), "split.n_per_class",
                reason=("the code's OLMo set lists each of its 30 non-members twice (60 rows, 30 distinct: "
                        "data.distinct_nonmembers): AUROC and TPR at FPR are those of the 30 once each; here each "
                        "non-member once") if name == "lara_olmo_rlzero" else None),
        Setting("data.distinct_nonmembers", "build_split",
                Table(bench, lambda f: int(user_turns(f[f["member"] == 0]).nunique()),
                      "distinct member == 0 user turns"),
                "split.n_per_class"),
        Setting("data.answer_line", "lara_perturbations", Table(bench, ends_with_answer_line,
                                                                 "the end of every user turn"),
                "perturbations.question.template", expect=lambda line: "{question}" + line.replace("{", "{{")
                .replace("}", "}}")),
        Setting("data.system_turn", "lara_baselines", Table(bench, one_system_turn, "the system turn of every row"),
                "baselines.system_prompt"),
        Setting("data.whitespace", "build_pool", Table(bench, lambda f: bool(user_turns(f).str.contains("\n").any()),
                                                        "a user turn holds a line break"),
                "pool.line_breaks_kept",
                reason=("the lara_rl pools whitespace-normalise each problem (mialab.data.families.lara, the data "
                        "family of the shared pools): a problem's display-math line breaks become spaces, which "
                        "changes its tokens (and the hidden states LaRA reads) slightly; the code reads the "
                        "dataset's text as written")),
        # -- perturbations (lara_perturbations) --------------------------------------------------------
        Setting("perturbations.neighbours.n", "lara_perturbations",
                Find(REP_STIFF, r"num_similar_questions: int = (\d+)"), "perturbations.neighbours.n"),
        Setting("perturbations.llm.model", "lara_perturbations", Find(REP_STIFF, r'openrouter_model: str = "([^"]+)"'),
                "perturbations.llm.model",
                reason=("gpt-4o-mini is reached over OpenRouter; a run here has no network, so an open instruction "
                        "model on vLLM writes the neighbours, blanks and paraphrases (Qwen2.5-7B-Instruct, the "
                        "code's prompts and temperatures)")),
        Setting("perturbations.neighbours.temperature", "lara_perturbations",
                literal(f"{UTILS}/make_similar_questions.py", "generate_similar_questions", r'"temperature": ([\d.]+)'),
                "perturbations.neighbours.temperature"),
        Setting("perturbations.neighbours.max_tokens", "lara_perturbations",
                literal(f"{UTILS}/make_similar_questions.py", "generate_similar_questions", r'"max_tokens": (\d+)'),
                "perturbations.llm.max_new_tokens"),
        Setting("perturbations.neighbours.prompt", "lara_perturbations",
                FString(f"{UTILS}/make_similar_questions.py", "generate_similar_questions",
                        fields={"num_questions": "{m}", "original_question": "{question}"}), "prompts.neighbours"),
        Setting("perturbations.neighbours.attempts", "lara_perturbations",
                Derived(lambda retries: retries + 1, (Find(f"{UTILS}/make_similar_questions.py",
                                                          r'OPENROUTER_MAX_RETRIES", "(\d+)"'),)),
                "constants.neighbour_attempts"),
        Setting("perturbations.neighbours.parse", "lara_perturbations",
                Find(f"{UTILS}/make_similar_questions.py", r"(q\.strip\(\) and len\(q\.strip\(\)\) > 20)", raw=True),
                "constants.neighbour_parse",
                reason=("an answer that is no JSON array is read as an enumerated list or plain lines "
                        "(mialab.text.llm_prompts.parse_list), and copies of the question or items with [BLANK] are "
                        "rejected; the code keeps every line longer than 20 characters")),
        Setting("perturbations.blank.strategy", "lara_perturbations",
                shell_var(script, "REP_STIFF_INCOMPLETE_BLANK_STRATEGY"), "perturbations.blank.backend",
                expect=lambda v: {"important": "llm"}.get(v, v)),
        Setting("perturbations.blank.num_blanks", "lara_perturbations", shell_var(script, "K_BLANKS"),
                "perturbations.blank.num_blanks"),
        Setting("perturbations.blank.temperature", "lara_perturbations",
                literal(f"{UTILS}/make_incomplete_questions.py", "generate_incomplete_questions_by_importance_batch",
                        r'"temperature": ([\d.]+)'), "perturbations.blank.temperature"),
        Setting("perturbations.blank.max_tokens", "lara_perturbations",
                literal(f"{UTILS}/make_incomplete_questions.py", "generate_incomplete_questions_by_importance_batch",
                        r'"max_tokens": (\d+)'), "perturbations.llm.max_new_tokens"),
        Setting("perturbations.blank.prompt", "lara_perturbations",
                FString(f"{UTILS}/make_incomplete_questions.py", "generate_incomplete_questions_by_importance_batch",
                        fields={"num_blanks": "{num_blanks}", "numbered_questions": "1. {question}"}),
                "prompts.blank"),
        Setting("perturbations.blank.texts_per_call", "lara_perturbations",
                Derived(lambda n, _: 1 + n, (Find(REP_STIFF, r"num_similar_questions: int = (\d+)"),
                                          Find(REP_STIFF, r"(all_questions = \[question\])", raw=True))),
                "constants.blank_texts_per_call",
                reason=("one text per call, the code's own fallback (generate_incomplete_question_by_importance, the "
                        "same prompt); the code first asks for a question and its 5 neighbours in one numbered call "
                        "(a JSON array back), which lets the model blank the group alike")),
        Setting("perturbations.blank.rounds", "lara_perturbations",
                Derived(lambda retries: retries + 1, (Find(REP_STIFF, r"max_incomplete_retries: int = (\d+)"),)),
                "constants.blank_attempts"),
        Setting("perturbations.blank.attempts_per_round", "lara_perturbations",
                Derived(lambda retries: retries + 1, (Find(f"{UTILS}/make_incomplete_questions.py",
                                                          r'OPENROUTER_MAX_RETRIES", "(\d+)"'),)),
                "constants.blank_asks_per_round",
                reason=("a round asks each text still without a valid blank once here; the code's round asks the "
                        "group up to 7 times until every blank is valid, then each text alone up to 7 times")),
        Setting("perturbations.min_valid_neighbours", "lara_perturbations",
                Find(REP_STIFF, r"min_valid_similars: int = (\d+)"), "constants.min_neighbours",
                test="tests/test_lara.py::test_a_neighbour_whose_llm_blank_stays_invalid_leaves_its_group_down_to_two_"
                     "as_the_code"),
        Setting("perturbations.invalid_question", "lara_perturbations",
                Find(REP_STIFF, r"(if orig_key not in incomplete_mapping:)", raw=True), "constants.invalid_question",
                reason=("a question whose own blank stays invalid, or with fewer than 2 valid neighbours, stops the "
                        "job naming it (mialab.lara.construction.kept_units); the code scores it NaN and leaves it "
                        "out of that method's AUROC (evaluation.nan_rows)")),
        Setting("perturbations.paraphrase.n_variants", "lara_perturbations",
                Find(REP_STIFF, r"num_rsi_variants: int = (\d+)"), "perturbations.paraphrase.n_variants"),
        Setting("perturbations.paraphrase.temperature", "lara_perturbations",
                literal(f"{UTILS}/make_incomplete_questions_rsi.py", "generate_incomplete_variants_batch",
                        r'"temperature": ([\d.]+)'), "perturbations.paraphrase.temperature"),
        Setting("perturbations.paraphrase.max_tokens", "lara_perturbations",
                literal(f"{UTILS}/make_incomplete_questions_rsi.py", "generate_incomplete_variants_batch",
                        r'"max_tokens": (\d+)'), "perturbations.paraphrase.max_new_tokens"),
        Setting("perturbations.paraphrase.prompt", "lara_perturbations",
                FString(f"{UTILS}/make_incomplete_questions_rsi.py", "generate_incomplete_variants_batch",
                        fields={"num_variants": "{n}", "incomplete_question": "{question}"}), "prompts.paraphrase",
                test="tests/test_lara_workflow.py::test_llm_perturbation_backends_run_from_the_config_at_the_codes_"
                     "temperatures"),
        Setting("perturbations.paraphrase.edit_prompt", "lara_perturbations",
                FString(f"{UTILS}/make_incomplete_questions_rsi.py", "generate_question_variants_batch",
                        fields={"num_variants": "{n}", "question": "{question}"}), "prompts.paraphrase_edit"),
        Setting("perturbations.paraphrase.kept", "lara_perturbations",
                literal(f"{UTILS}/make_incomplete_questions_rsi.py", "generate_incomplete_variants_batch",
                        r"return (variants\[:num_variants\])"), "constants.paraphrase_kept",
                reason=("each of a text's 5 variants must keep its blank count and differ from the text and the "
                        "others, else the text is asked again (3 times, then the job stops naming it); the code keeps "
                        "the first 5 items of the answer's array unchecked")),
        Setting("perturbations.per_checkpoint", "lara_perturbations",
                Derived(lambda *dirs: sorted(set(dirs)), tuple(output_dir(s) for s in (script, *e.epoch_scripts))),
                "constants.perturbation_folders", expect=lambda dirs: "1 per checkpoint",
                reason=("the perturbations are made once per dataset and shared by the released checkpoint and its "
                        "RL checkpoints (the same neighbours, blanks and paraphrases for each); the code's run of each "
                        "checkpoint writes its own output folder, so each draws its own LLM samples")),
        Setting("eval.model_path", "lara_baselines", Find(script, r'^\s+--model_path "([^"]+)"', raw=True), None,
                reason="the audited model: the experiment's checkpoints (models.*)"),
        Setting("eval.data_root_dir", "build_split", shell_var(script, "DATA_ROOT_DIR"), None,
                reason="the evaluation set: the data.* rows"),
        *(Setting(f"eval.{flag}", stage, argparse_default(path, f"--{flag}"), None, reason=why)
          for flag, path, stage, why in (
              ("tensor_parallel_size", GENERATE, "lara_baselines", N_A_MEMORY),
              ("gpu_memory_utilization", GENERATE, "lara_baselines", N_A_MEMORY),
              ("swap_space", GENERATE, "lara_baselines", N_A_MEMORY),
              ("vllm_random_microbatch", GENERATE, "lara_baselines", N_A_MEMORY),
              ("rep_stiff_max_workers", EVALUATE, "lara_perturbations", "concurrent API calls: speed only"),
              ("rep_stiff_combined_v4_alpha", EVALUATE, "lara_scores", OTHER_SCORES),
              ("rep_stiff_combined_rule", EVALUATE, "lara_scores", OTHER_SCORES))),
        Setting("eval.methods_to_run", "lara_baselines", Find(script, r"^METHODS_TO_RUN=\((.*)\)", raw=True),
                "constants.generated_baselines", expect=lambda v: [x.strip('"') for x in v.split()]),
        # -- features (lara_features) ------------------------------------------------------------------
        Setting("features.dtype", "lara_features",
                Find(f"{UTILS}/rsm_calculation.py", r"torch_dtype=torch\.(\w+)", after=r"def initialize_model\("),
                "features.dtype"),
        Setting("features.layers", "lara_features", shell_var(script, e.layers_var), "features.probed_layers"),
        Setting("features.pooling", "lara_features",
                Find(f"{UTILS}/rsm_calculation.py", r"rep = (hidden\.mean\(dim=1\))", raw=True),
                "features.special_tokens", expect=lambda v: True),
        Setting("features.truncation", "lara_features",
                Find(f"{UTILS}/rsm_calculation.py", r"truncation=(\w+)", after=r"def extract_representation\("),
                "features.truncated",
                reason=("every token of a question is read (lara.features.max_length absent); the code cuts at the "
                        "tokenizer's model_max_length, far beyond any question")),
        Setting("features.text", "lara_features",
                Find(f"{UTILS}/rsm_calculation.py", r"(inputs = tokenizer\()", raw=True,
                     after=r"def extract_representation\("), "features.text", expect=lambda v: "the question, raw"),
        # -- detection (lara_scores) ---------------------------------------------------------------------
        Setting("detection.eps", "lara_scores", shell_var(script, "REP_STIFF_LARA_EPS"), "constants.detection_eps"),
        Setting("detection.reference", "lara_scores", shell_var(script, "REP_STIFF_LARA_CLEAN_REF"),
                "scores.detection.reference", expect=lambda v: "in_set" if v == "" else v,
                reason=("fitted on known non-members outside the split (held_out, label-clean); the code's default "
                        "fits on the evaluated set's own label-0 rows, which reads the evaluation labels and scores "
                        "above chance on null data: lara.detection.reference: in_set reproduces it, its columns named "
                        "lara_in_set")),
        Setting("detection.beta", "lara_scores", shell_var(script, "REP_STIFF_LARA_MIX_BETA"), "scores.beta_0_65"),
        Setting("detection.layer_window", "lara_scores", shell_var(script, "REP_STIFF_LARA_ROBUST_LAYER_WINDOW"),
                "constants.layer_window"),
        Setting("detection.dc_weight", "lara_scores", shell_var(script, "REP_STIFF_LARA_ROBUST_DC_WEIGHT"),
                "constants.dc_weight"),
        Setting("detection.mad_scale", "lara_scores", Find(EVALUATE, r"sigma = ([\d.]+) \* mad"),
                "constants.mad_to_sd"),
        Setting("detection.compression", "lara_scores",
                Find(EVALUATE, r"return (np\.sign\(arr\) \* np\.log1p\(np\.abs\(arr\)\))", raw=True),
                "constants.compression",
                expect=lambda v: "sign(x) log(1 + |x|)"),
        Setting("detection.aggregate", "lara_scores", Find(EVALUATE, r"(abs_zhat = np\.abs\(zhat_stack\))", raw=True),
                "scores.detection.how", expect=lambda v: "abs"),
        Setting("detection.mad_zero", "lara_scores",
                Find(EVALUATE, r"z = (\(raw_for_stats - mu\) / \(sigma \+ lara_eps\))", raw=True),
                "constants.mad_zero",
                reason=("a reference whose MAD is 0 (half its values equal) is scaled by 1.2533 x its mean absolute "
                        "deviation (mialab.lara.detection.robust_scale); the code divides by eps (1e-8), z of 1e8")),
        Setting("evaluation.nan_rows", "evaluate_dataset",
                Find(EVALUATE, r"(df_method = df_scores\.dropna\(subset=\[method_name\]\))", raw=True),
                "constants.nan_rows",
                reason=("every question of a split is scored (a non-finite score is an error); the code drops a "
                        "method's NaN rows from its AUROC")),
        Setting("evaluation.tpr_at_fpr", "evaluate_dataset", Find(EVALUATE, r'"(tpr_at_fpr_5)"', raw=True),
                "evaluation.tpr_at_5", expect=lambda v: True),
        # -- baselines (lara_baselines) ----------------------------------------------------------------
        *(Setting(f"baselines.{name}", "lara_baselines", shell_var(script, var), f"baselines.{key}")
          for name, var, key in (("max_tokens.cdd", "MAX_NEW_TOKENS", "cdd.max_new_tokens"),
                                 ("max_tokens.self_critique", "MAX_NEW_TOKENS", "self_critique.max_new_tokens"),
                                 ("cdd.n_samples", "NUM_RANDOM_SAMPLES", "cdd.n_samples"),
                                 ("cdd.temperature", "TEMPERATURE_RANDOM", "cdd.temperature"),
                                 ("perturbation_prefix", "PERTURBATION_PREFIX", "responses.perturbation_prefix"),
                                 ("perturbation_suffix", "PERTURBATION_SUFFIX", "responses.perturbation_suffix"))),
        Setting("baselines.cdd.top_p", "lara_baselines", Find(GENERATE, r"top_p=([\d.]+)", after=r"random_params = "),
                "baselines.cdd.top_p"),
        Setting("baselines.cdd.alpha", "lara_baselines", Find(EVALUATE, r"CDDDetector\(alpha=([\d.]+)\)"),
                "baselines.cdd.alpha"),
        Setting("baselines.greedy_temperature", "lara_baselines", argparse_default(GENERATE, "--temperature"),
                "constants.greedy_temperature"),
        Setting("baselines.top_k_logprobs", "lara_baselines", argparse_default(GENERATE, "--K"),
                "baselines.top_k_logprobs"),
        Setting("baselines.min_k", "lara_baselines", argparse_default(EVALUATE, "--mink_ratio"),
                "baselines.responses.min_k"),
        Setting("baselines.prompt_template", "lara_baselines", argparse_default(GENERATE, "--prompt_template"),
                "constants.prompt_template",
                expect=lambda v: {"own": "the dataset's chat: system turn, user turn"}.get(v, v)),
        Setting("baselines.self_critique.instruction", "lara_baselines",
                FString(GENERATE, "main", var="SELF_CRITIQUE_INSTRUCTION"), "prompts.self_critique",
                expect=lambda v: "{question}" + v),
        Setting("baselines.self_critique.headroom", "lara_baselines",
                Find(GENERATE, r"len\(template_token_ids\) - (\d+)\)"), "baselines.self_critique.headroom"),
        Setting("baselines.self_critique.margin", "lara_baselines", Find(GENERATE, r"max_prompt_len - (\d+)\)"),
                "constants.critique_margin"),
        Setting("baselines.context", "lara_baselines",
                Find(GENERATE, r"max_model_len = (llm\.llm_engine\.model_config\.max_model_len)", raw=True),
                "constants.context", expect=lambda v: "the model config's max_position_embeddings"),
        Setting("baselines.batch_size", "lara_baselines", shell_var(script, "BATCH_SIZE"), None,
                reason="how many questions vLLM takes at once: speed only (each text its own forward pass here)"),
        Setting("baselines.dtype", "lara_baselines", Find(GENERATE, r'dtype="(\w+)"', after=r"llm_kwargs = dict\("),
                "baselines.dtype"),
        Setting("baselines.engine", "lara_baselines", Find(GENERATE, r"^from (vllm) import LLM", raw=True),
                "constants.baseline_engine",
                reason=("transformers' generate answers (bf16, greedy and CDD's samples at the code's settings); the "
                        "code's vLLM may pick another token where two are within rounding")),
    ]
    return rows + rl_settings(e, corpus, corpus_note)


def rl_settings(e: Experiment, corpus: str, corpus_note: str) -> list[Setting]:
    """The continued-RL settings (rl_contaminate): eurus_grpo.sh's verl launch, its Hydra defaults and code."""
    olmo = e.model == "olmo_rlzero"
    checkpoints = Setting(
        "rl.evaluated_checkpoints", "rl_contaminate",
        Derived(lambda *ids: list(ids), tuple(shell_var(s, "HF_MODEL_ID") for s in e.epoch_scripts))
        if e.epoch_scripts else shell_var(e.script, "HF_MODEL_ID"),
        "rl.epochs_evaluated", expect=lambda ids: [1, 2] if isinstance(ids, list) and len(ids) == 2 else ids,
        reason=("the released code evaluates no continued-RL checkpoint of OLMo (no OLMOE epoch script): the "
                "project trains and audits them as Eurus's and LIMR's, with eurus_grpo.sh's settings")
        if olmo else None)
    launch_note = (" (LIMR's checkpoints, talzoomanzoo/eurus_grpo_rlmia_epoch_*, carry eurus_grpo.sh's default "
                   "HF_REPO_PREFIX: the script, its model and corpus overridden)") if e.model == "limr" else ""
    na = lambda name, locate, reason: Setting(name, "rl_contaminate", locate, None, reason=reason)  # noqa: E731
    return [
        checkpoints,
        Setting("rl.algorithm.adv_estimator", "rl_contaminate", shell_arg("algorithm.adv_estimator"),
                "rl.constants.adv_estimator"),
        Setting("rl.algorithm.grpo_use_std", "rl_contaminate", shell_arg("algorithm.grpo_use_std"),
                "rl.train.scale_rewards", expect=lambda v: "group" if v else "none"),
        Setting("rl.algorithm.kl_ctrl.kl_coef", "rl_contaminate", shell_arg("algorithm.kl_ctrl.kl_coef"),
                "rl.train.beta"),
        Setting("rl.data.train_batch_size", "rl_contaminate", shell_arg("data.train_batch_size"), "rl.rollout_prompts"),
        Setting("rl.data.max_prompt_length", "rl_contaminate", shell_arg("data.max_prompt_length"),
                "rl.train.max_prompt_length"),
        Setting("rl.data.filter_prompts", "rl_contaminate",
                Find(f"{MIX}/mix_trainer.py", r"filter_prompts=(\w+)"), "rl.constants.filter_long_prompts",
                reason=("a prompt longer than 1,024 tokens keeps its last 1,024 (max_prompt_length); the code drops "
                        "such a prompt from the corpus (RLHFDataset's filter): no prompt of its released corpora comes "
                        "near (2,520 characters at most, its system turn included)")),
        Setting("rl.data.max_response_length", "rl_contaminate", shell_arg("data.max_response_length"),
                "rl.train.max_completion_length"),
        Setting("rl.data.reward_impl_version", "rl_contaminate", shell_arg("data.reward_impl_version"), "rl.reward",
                expect=lambda v: {"name": "math_verify"} if v == 3 else {"name": "math_verify", "think": False}
                if v == 4 else v),
        Setting("rl.data.shuffle", "rl_contaminate", shell_arg("data.shuffle"), "rl.constants.shuffle"),
        Setting("rl.data.drop_last", "rl_contaminate", Find(f"{MIX}/mix_trainer.py", r"drop_last=(\w+)"),
                "rl.constants.drop_last"),
        Setting("rl.data.order_seed", "rl_contaminate",
                Find(f"{MIX}/rl_dataset_with_target.py", r"manual_seed\((\d+)\)"), "rl.constants.order_seed",
                reason=("the prompt order is a seeded permutation per epoch either way (here of the corpus built "
                        "from the split, seed models.<rl>.train.seed); the code's torch generator 47 permutes its "
                        "parquet's rows, whose order is not the project's corpus")),
        Setting("rl.data.val_files", "rl_contaminate", shell_arg("data.val_files"), None, reason=N_A_VALIDATION),
        Setting("rl.data.val_batch_size", "rl_contaminate", shell_arg("data.val_batch_size"), None,
                reason=N_A_VALIDATION),
        Setting("rl.actor.optim.lr", "rl_contaminate", ref_arg("actor.optim.lr"), "rl.train.lr"),
        Setting("rl.actor.optim.warmup", "rl_contaminate", hydra("optim", "lr_warmup_steps_ratio", indent=6),
                "rl.train.warmup_steps", expect=lambda v: 0 if v == 0 else v),
        Setting("rl.actor.optim.schedule", "rl_contaminate", hydra("optim", "warmup_style", indent=6),
                "rl.train.lr_scheduler"),
        Setting("rl.actor.optim.weight_decay", "rl_contaminate",
                Find(f"{MIX}/mix_fsdp_worker.py", r"optim_config\.get\('weight_decay', ([\de.-]+)\)"),
                "rl.train.weight_decay"),
        Setting("rl.actor.optim.betas", "rl_contaminate",
                Find(f"{MIX}/mix_fsdp_worker.py", r"optim_config\.get\('betas', \(([\d., ]+)\)\)", raw=True),
                "rl.constants.adam_betas", expect=lambda v: [float(x) for x in v.split(",")]),
        Setting("rl.actor.grad_clip", "rl_contaminate", hydra("actor", "grad_clip"), "rl.train.grad_clip"),
        Setting("rl.actor.clip_ratio", "rl_contaminate", hydra("actor", "clip_ratio"), "rl.train.epsilon"),
        Setting("rl.actor.clip_upper_bound", "rl_contaminate",
                Derived(lambda bound, ratio: max(bound, 1 + ratio), (hydra("actor", "clip_upper_bound"),
                                                                      hydra("actor", "clip_ratio"))),
                "rl.constants.ratio_upper_bound"),
        Setting("rl.actor.ppo_mini_batch_size", "rl_contaminate", ref_arg("actor.ppo_mini_batch_size"),
                "rl.update_prompts"),
        Setting("rl.actor.ppo_epochs", "rl_contaminate", hydra("actor", "ppo_epochs"), "rl.train.num_iterations"),
        Setting("rl.actor.updates_per_batch", "rl_contaminate",
                Derived(lambda batch, mini, epochs: batch // mini * epochs,
                        (shell_arg("data.train_batch_size"), ref_arg("actor.ppo_mini_batch_size"),
                         hydra("actor", "ppo_epochs"))), "rl.updates_per_rollout",
                test=T_RL + "test_verls_mini_batches_are_several_optimizer_steps_per_rollout_batch_as_trl_runs_them"),
        Setting("rl.actor.shuffle", "rl_contaminate", hydra("actor", "shuffle"), "rl.constants.mini_batch_shuffle",
                reason=("which completions share an update: TRL shuffles each process's share of the rollout batch "
                        "before cutting it; verl cuts its sequence-length-balanced order (ray_trainer._balance_batch) "
                        "unshuffled. Each update still holds 32 of the batch's 512 completions")),
        Setting("rl.actor.loss_remove_token_mean", "rl_contaminate",
                ref_arg("actor.loss_remove_token_mean"), "rl.train.loss_type",
                expect=lambda v: "dr_grpo" if v else "bnpo"),
        Setting("rl.actor.loss_scale", "rl_contaminate",
                Derived(lambda mini, n, gpus: mini * n // gpus,
                        (ref_arg("actor.ppo_mini_batch_size"), ref_arg("rollout.n"),
                         shell_arg("trainer.n_gpus_per_node"))), "rl.train.policy_loss_scale", test=T_ENTROPY),
        Setting("rl.actor.old_log_prob", "rl_contaminate",
                Find(f"{MIX}/mix_trainer.py", r"(old_log_prob = self\.actor_rollout_wg\.compute_log_prob\(batch\))",
                     raw=True), "rl.constants.old_log_probs",
                expect=lambda v: "the sampling policy's, once per rollout batch"),
        Setting("rl.reward.decoded", "rl_contaminate", Find(f"{MIX}/main_mix_ppo.py",
                                                            r"sequences_str = (self\.tokenizer\.decode\(sequences\))",
                                                            raw=True), "rl.constants.reward_text",
                expect=lambda v: "special tokens kept",
                reason=("the reward reads the completion decoded without special tokens (TRL's); the code's keeps "
                        "them (an end-of-turn token after the answer): math-verify reads the same last boxed answer")),
        Setting("rl.actor.entropy_coeff", "rl_contaminate", ref_arg("actor.entropy_coeff"),
                "rl.train.entropy_coeff"),
        Setting("rl.actor.entropy_aggregation", "rl_contaminate",
                Find(f"{MIX}/mix_actor.py", r"entropy_loss = (verl_F\.masked_mean\(entropy, response_mask\))",
                     raw=True),
                "rl.train.entropy_aggregation", expect=lambda v: "token_mean", test=T_ENTROPY),
        Setting("rl.actor.use_dynamic_bsz", "rl_contaminate", ref_arg("actor.use_dynamic_bsz"),
                "rl.constants.entropy_over_micro_batches",
                expect=lambda v: "summed over a rank's micro-batches" if v else "one micro-batch",
                reason=("the entropy bonus is one token mean per micro-step here; the code cuts a rank's 8 "
                        "completions into micro-batches of at most 16,384 tokens (ppo_max_token_len_per_gpu) and adds "
                        "their token means (gradient_accumulation 1), so its bonus weighs 1-3x more at 4,096-token "
                        "responses, depending on the lengths")),
        Setting("rl.actor.kl_loss_coef", "rl_contaminate", ref_arg("actor.kl_loss_coef"),
                "rl.train.beta"),
        Setting("rl.actor.use_kl_loss", "rl_contaminate", ref_arg("actor.use_kl_loss"),
                "rl.constants.kl_loss"),
        Setting("rl.ref.use_ref", "rl_contaminate", ref_arg("ref.use_ref"),
                "rl.constants.reference_model"),
        Setting("rl.model.enable_gradient_checkpointing", "rl_contaminate",
                ref_arg("model.enable_gradient_checkpointing"), "rl.train.activation_checkpointing"),
        Setting("rl.model.precision", "rl_contaminate",
                Find(f"{MIX}/mix_fsdp_worker.py", r"param_dtype = (torch\.bfloat16)", raw=True), "rl.train.precision",
                expect=lambda v: "bf16"),
        Setting("rl.model.path", "rl_contaminate",
                Find(GRPO, r'^export MODEL_REPO_ID="\$\{MODEL_REPO_ID:-([^}]*)\}"'),
                "rl.init_path" if e.model == "eurus_prime" else None,
                reason=None if e.model == "eurus_prime" else
                ("eurus_grpo.sh's default model is Eurus's; " + ("the code's LIMR run overrides it" + launch_note
                 if e.model == "limr" else "the code has no OLMo run") + ": each run here starts from its own model")),
        Setting("rl.rollout.name", "rl_contaminate", ref_arg("rollout.name"),
                "rl.constants.rollout_engine",
                reason=("rollouts are sampled by transformers' generate (models.<rl>.train.vllm absent), from the "
                        "same distribution (temperature 1, no top-p or top-k cut); verl samples them with vLLM")),
        Setting("rl.rollout.n", "rl_contaminate", ref_arg("rollout.n"), "rl.train.num_generations"),
        Setting("rl.rollout.temperature", "rl_contaminate", ref_arg("rollout.temperature"),
                "rl.train.temperature"),
        Setting("rl.rollout.top_p", "rl_contaminate", hydra("rollout", "top_p"), "rl.train.top_p"),
        Setting("rl.rollout.top_k", "rl_contaminate", hydra("rollout", "top_k"), "rl.train.top_k",
                expect=lambda v: 0 if v == -1 else v),
        Setting("rl.rollout.max_prefix_ratio", "rl_contaminate", ref_arg("rollout.max_prefix_ratio"),
                "rl.constants.prefix_ratio"),
        Setting("rl.trainer.n_gpus_per_node", "rl_contaminate", shell_arg("trainer.n_gpus_per_node"), "rl.world",
                reason=("8 GPUs per job here (a node): the batches are kept in prompts (128 per rollout batch, 8 per "
                        "update) and the loss in the code's per-rank scale (rl.actor.loss_scale)")),
        Setting("rl.trainer.total_epochs", "rl_contaminate", shell_arg("trainer.total_epochs"), "rl.train.epochs"),
        Setting("rl.trainer.steps_per_epoch", "rl_contaminate",
                Derived(lambda rows, batch, mini: rows // batch * (batch // mini),
                        (Table(corpus, len, "rows" + corpus_note), shell_arg("data.train_batch_size"),
                         ref_arg("actor.ppo_mini_batch_size"))), "rl.steps_per_epoch"),
        Setting("rl.trainer.save_by_epoch", "rl_contaminate", shell_arg(r"\+trainer.save_by_epoch"),
                "rl.constants.save_by_epoch"),
        Setting("rl.trainer.save_freq", "rl_contaminate", shell_arg("trainer.save_freq"), None,
                reason=("the fork's periodic save is commented out (mix_trainer.py: only epoch and final checkpoints); "
                        "here a resumable trainer checkpoint every rollout batch (train.save_steps 16), which changes "
                        "nothing trained")),
        Setting("rl.trainer.rejection_sample", "rl_contaminate", hydra("trainer", "rejection_sample", indent=2),
                "rl.constants.rejection_sample"),
        Setting("rl.trainer.test_freq", "rl_contaminate", shell_arg("trainer.test_freq"), None, reason=N_A_VALIDATION),
        Setting("rl.rollout.val_temperature", "rl_contaminate", ref_arg("rollout.val_temperature"),
                None, reason=N_A_VALIDATION),
        na("rl.actor.ppo_micro_batch_size", ref_arg("actor.ppo_micro_batch_size"),
           N_A_MEMORY + " (dynamic micro-batches: rl.actor.use_dynamic_bsz)"),
        na("rl.actor.ppo_max_token_len_per_gpu", ref_arg("actor.ppo_max_token_len_per_gpu"),
           N_A_MEMORY + " (the entropy's micro-batches: rl.actor.use_dynamic_bsz)"),
        na("rl.model.use_remove_padding", ref_arg("model.use_remove_padding"), N_A_MEMORY),
        na("rl.actor.fsdp_config.param_offload", ref_arg("actor.fsdp_config.param_offload"), N_A_MEMORY),
        na("rl.rollout.gpu_memory_utilization", ref_arg("rollout.gpu_memory_utilization"), N_A_MEMORY),
        na("rl.rollout.tensor_model_parallel_size", ref_arg("rollout.tensor_model_parallel_size"),
           N_A_MEMORY),
        na("rl.actor.ulysses_sequence_parallel_size", ref_arg("actor.ulysses_sequence_parallel_size"),
           N_A_MEMORY),
        na("rl.actor.kl_loss_type", ref_arg("actor.kl_loss_type"), "the KL loss is off (kl_loss_coef 0)"),
        na("rl.actor.use_off_policy_loss", ref_arg("actor.use_off_policy_loss"),
           N_A_PREFIX + "; with no prefix its loss is the on-policy clipped objective"),
        na("rl.rollout.prefix_strategy", ref_arg("rollout.prefix_strategy"), N_A_PREFIX),
        na("rl.rollout.n_prefix", ref_arg("rollout.n_prefix"), N_A_PREFIX),
        na("rl.trainer.critic_warmup", shell_arg("trainer.critic_warmup"),
           "GRPO has no critic (advantages from each group's rewards)"),
        *(na(f"rl.{key}", locate, why) for key, locate, why in (
            ("data.train_files", shell_arg("data.train_files"), "the corpus: the rl.corpus.* rows"),
            ("actor.fsdp_config.grad_offload", ref_arg("actor.fsdp_config.grad_offload"), N_A_MEMORY),
            ("actor.fsdp_config.optimizer_offload", ref_arg("actor.fsdp_config.optimizer_offload"), N_A_MEMORY),
            ("ref.fsdp_config.param_offload", ref_arg("ref.fsdp_config.param_offload"), N_A_MEMORY),
            ("rollout.n_val", ref_arg("rollout.n_val"), N_A_VALIDATION),
            ("trainer.val_before_train", shell_arg(r"\+trainer.val_before_train"), N_A_VALIDATION),
            ("rollout.max_prefix_len", ref_arg("rollout.max_prefix_len"), N_A_PREFIX),
            ("rollout.min_prefix_ratio", ref_arg("rollout.min_prefix_ratio"), N_A_PREFIX),
            ("rollout.prefix_share_across_samples", ref_arg("rollout.prefix_share_across_samples"), N_A_PREFIX),
            ("rollout.prefix_reward_weight_alpha", ref_arg("rollout.prefix_reward_weight_alpha"), N_A_PREFIX),
            ("actor.use_sft_prefix_reward", ref_arg("actor.use_sft_prefix_reward"), N_A_PREFIX),
            ("actor.off_policy_normalize", ref_arg("actor.off_policy_normalize"), N_A_PREFIX),
            ("actor.off_policy_loss_impl", ref_arg("actor.off_policy_loss_impl"), N_A_PREFIX),
            ("trainer.nnodes", shell_arg("trainer.nnodes"), "one node either way (rl.trainer.n_gpus_per_node)"),
            ("trainer.save_final_checkpoint", shell_arg(r"\+trainer.save_final_checkpoint"),
             "the last epoch's checkpoint is the run's last (rl.trainer.save_by_epoch)"),
            ("trainer.max_optim_to_keep", shell_arg("trainer.max_optim_to_keep"), CHECKPOINT_FILES),
            ("trainer.default_local_dir", shell_arg("trainer.default_local_dir"), CHECKPOINT_FILES),
            ("trainer.default_hdfs_dir", shell_arg("trainer.default_hdfs_dir"), CHECKPOINT_FILES),
            ("trainer.logger", shell_arg("trainer.logger"), LOGGING),
            ("trainer.project_name", shell_arg("trainer.project_name"), LOGGING),
            ("trainer.experiment_name", shell_arg("trainer.experiment_name"), LOGGING))),
        # -- the RL corpus ------------------------------------------------------------------------------
        Setting("rl.corpus.size", "rl_contaminate", Table(corpus, len, "rows" + corpus_note), "rl.corpus.size"),
        Setting("rl.corpus.members", "rl_contaminate", Table(corpus, lambda f: int((f["member"] == 1).sum()),
                                                             "member == 1 rows" + corpus_note), "rl.members"),
        Setting("rl.corpus.chat", "rl_contaminate",
                Find(f"{MIX}/rl_dataset_with_target.py", r"(apply_chat_template\(chat, add_generation_prompt=True)",
                     raw=True), "rl.corpus.chat", expect=lambda v: True,
                test=T_RL + "test_rl_prompts_are_conversations_rendered_with_the_chat_template_as_verls_rl_dataset"),
        Setting("rl.corpus.member_system", "rl_contaminate",
                Table(e.corpus or e.benchmark, lambda f: one_system_turn(member_rows(f)), "the members' system turn"),
                "rl.corpus.system"),
        Setting("rl.corpus.member_template", "rl_contaminate",
                Table(e.corpus or e.benchmark, lambda f: ends_with_answer_line(member_rows(f)),
                      "the end of the members' user turns"), "rl.corpus.template",
                expect=lambda line: "{question}" + line.replace("{", "{{").replace("}", "}}")),
        Setting("rl.corpus.filler_system", "rl_contaminate",
                Table(corpus, lambda f: one_system_turn(f[f["member"] == 0]), "the fillers' system turn" + corpus_note),
                "rl.corpus.filler_system"),
        Setting("rl.corpus.filler_template", "rl_contaminate",
                Table(corpus, lambda f: ends_with_answer_line(f[f["member"] == 0]),
                      "the end of the fillers' user turns" + corpus_note), "rl.corpus.filler_template",
                expect=lambda line: "{question}" + line),
    ]


# -- the project's side ----------------------------------------------------------------------------------
def hub_layers(model: str) -> int | None:
    """``num_hidden_layers`` of a hub model (resources/model_heads.tsv)."""
    from mialab.pipeline.cluster_checks import MODEL_TABLE

    with open(MODEL_TABLE, newline="") as f:
        rows = csv.DictReader((line for line in f if not line.startswith("#")), delimiter="\t")
        found = {r["model"]: r["num_hidden_layers"] for r in rows}
    return int(found[model]) if found.get(model) else None


def default_of(function, parameter: str):
    return inspect.signature(function).parameters[parameter].default


def resolved_settings(config: dict, name: str) -> dict:
    """What the jobs of experiment ``name`` receive from ``config`` (validated, defaults filled): the stage
    configs of its plan (split, perturbations, features, baselines, scores, the RL run), the GRPO arithmetic on
    the GPUs an ``rl_contaminate`` job gets, the prompt files and the project's constants the spec maps to."""
    from transformers import TrainingArguments

    from mialab.lara.baselines import CRITIQUE_MARGIN
    from mialab.lara.blanking import blank_llm
    from mialab.lara.detection import MAD_TO_SD, Z_EPS
    from mialab.lara.neighbours import MIN_NEIGHBOURS, llm_neighbours
    from mialab.lara.plan import LaRAPlan
    from mialab.pipeline.plan import Plan
    from mialab.pipeline.sizing import Sizing
    from mialab.text.llm_prompts import load_template
    from mialab.training.grpo import GRPOSettings, steps_per_epoch, update_arithmetic

    e = EXPERIMENTS[name]
    plan = Plan(config)
    lara = LaRAPlan(plan, config)
    perturbations = lara.perturbation_run(e.dataset).manifest["config"]
    features = lara.model_run("features", e.model, e.dataset).manifest["config"]
    baselines = lara.model_run("baselines", e.model, e.dataset).manifest["config"]
    scores = lara.score_run(e.model, e.dataset).manifest["config"]
    run = plan.rl_run(e.rl[0])
    if plan.rl_run(e.rl[1]).key != run.key:
        raise ValueError(f"{e.rl} are not checkpoints of one run")
    rl = run.manifest["config"]
    world = Sizing(config, environ={}).job("rl_contaminate", model=e.rl[0]).gpus
    grpo = GRPOSettings.from_config(rl["train"])
    defaults = {f.name: f.default for f in dataclasses.fields(TrainingArguments)}
    init = config["models"][rl["init"]]
    return {
        "split": plan.split(e.dataset, plan.seeds()[0]).manifest["config"],
        "pool": {"line_breaks_kept": False},   # mialab.data.families.lara: whitespace-normalised problems
        "perturbations": perturbations,
        "features": {**features, "probed_layers": hub_layers(config["models"][e.model]["path"]),
                     "truncated": "max_length" in features, "text": "the question, raw"},
        "baselines": {**baselines, "system_prompt": baselines.get("system_prompt")},
        "scores": {**scores, "beta_0_65": 0.65 if 0.65 in scores["betas"] else None},
        "evaluation": {"tpr_at_5": 0.05 in config["evaluation"]["fpr_targets"]},
        "prompts": {k: load_template(k) for k in ("neighbours", "blank", "paraphrase", "paraphrase_edit",
                                                   "self_critique")},
        "constants": {
            "neighbour_attempts": default_of(llm_neighbours, "max_attempts"),
            "neighbour_parse": "a JSON array, else an enumerated list or lines; copies and [BLANK] items rejected",
            "blank_texts_per_call": 1,
            "blank_attempts": default_of(blank_llm, "max_attempts"),
            "blank_asks_per_round": 1,
            "context": "the model config's max_position_embeddings",
            "min_neighbours": MIN_NEIGHBOURS,
            "invalid_question": "an error naming it",
            "paraphrase_kept": "n_variants distinct items with the blank count kept, asked again",
            "detection_eps": Z_EPS, "layer_window": "all", "dc_weight": 1.0, "mad_to_sd": MAD_TO_SD,
            "compression": "sign(x) log(1 + |x|)", "mad_zero": "1.2533 x mean absolute deviation",
            "nan_rows": "an error", "greedy_temperature": 0.0, "critique_margin": CRITIQUE_MARGIN,
            "prompt_template": ("the dataset's chat: system turn, user turn" if baselines.get("system_prompt")
                                else "a user turn"),
            "baseline_engine": "transformers generate",
            "perturbation_folders": "1 per dataset",
            "generated_baselines": ["self_critique", "dime", "consistency"],
        },
        "rl": {
            **rl, "init_path": init.get("path", rl["init"]), "world": world, **update_arithmetic(grpo, world),
            "steps_per_epoch": steps_per_epoch(rl["corpus"]["size"], grpo, world),
            "train": {**dataclasses.asdict(grpo)},
            "members": config["datasets"][rl["members"]["dataset"]]["split"]["n_per_class"],
            "epochs_evaluated": sorted(config["models"][m]["epoch"] for m in e.rl),
            "corpus": {"chat": False, "system": None, "filler_system": None, **rl["corpus"],
                       "filler_template": rl["corpus"].get("filler_template", rl["corpus"]["template"])},
            "constants": {
                "adv_estimator": "grpo", "filter_long_prompts": False, "shuffle": True, "drop_last": True,
                "order_seed": grpo.seed, "adam_betas": [defaults["adam_beta1"], defaults["adam_beta2"]],
                "ratio_upper_bound": 1 + grpo.epsilon, "mini_batch_shuffle": True,
                "entropy_over_micro_batches": "one micro-batch", "kl_loss": grpo.beta > 0,
                "reference_model": grpo.beta > 0, "rollout_engine": "transformers" if grpo.vllm is None else "vllm",
                "prefix_ratio": 0.0, "save_by_epoch": True, "rejection_sample": False,
                "old_log_probs": ("the sampling policy's, once per rollout batch" if grpo.micro_steps_per_generation
                                  > grpo.grad_accum or grpo.num_iterations > 1 else "the policy's own, detached"),
                "reward_text": "special tokens skipped",
            },
        },
    }


def experiment_header(name: str) -> dict:
    """The document's header: the experiment, its paper and config, its models and the released code."""
    e = EXPERIMENTS[name]
    return {"experiment": name, "paper": "LaRA (Gwak et al. 2026), Table 1", "config": CONFIG,
            "models": {"target": e.model, "dataset": e.dataset, "continued_rl": list(e.rl)},
            "released_code": dict(RELEASED)}


def document_path(name: str) -> Path:
    return DOCS / f"{name}.yaml"


def paper_config() -> dict:
    """``configs/paper/lara_rl_models.yaml`` as the workflow reads it: the config as written, validated against the
    schema with its defaults filled in (``--config rehearsal=false``)."""
    import yaml

    from mialab.pipeline.config import validate_config

    config = yaml.safe_load((REPO / CONFIG).read_text())
    validate_config(config)
    return config


def documents(checkout: Path | None = None) -> dict[str, dict]:
    """Every experiment's reference document: read from ``checkout`` (the released code) and the paper config,
    or, without one, the committed documents with their project side refreshed from the config."""
    import copy

    from mialab.pipeline.fidelity import load, reference, refresh

    config = paper_config()
    out = {}
    for name in EXPERIMENTS:
        resolved = resolved_settings(copy.deepcopy(config), name)
        out[name] = (refresh(load(document_path(name)), settings(name), resolved) if checkout is None
                     else reference(experiment_header(name), settings(name), checkout, resolved))
    return out
