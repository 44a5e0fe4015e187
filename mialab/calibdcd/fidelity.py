"""CalibDCD's settings references (``docs/fidelity/calibdcd_<detector>_<dataset>.yaml``; the format:
``docs/fidelity/README.md``).

CalibDCD (Yang et al. 2026) has no released code; the two detectors it calibrates do, and the paper config
(``configs/paper/calibdcd_instruct_models.yaml``) runs each as its code does. One experiment per (detector, dataset)
of the config's ``calibdcd`` section: DPDLLM (github ZovanZhou/DPDLLM, read from a local checkout named by
``$DPDLLM_CODE``: ``train_detector.py``'s reference fine-tuning, ``generate_by_llm.py``'s target output,
``run_detection.py``'s features, ``predict_result.py``'s classifier; the length the README's commands pass) and
VeilProbe (github STAIR-BUPT/VeilProbe, ``$VEILPROBE_CODE``: ``key_perturb/``'s perturbation,
``sampling_close_sourced_LLM.py``'s target output, ``mappingmodel.py``'s mapping model,
``run_protonet_classifier.py`` and ``protonetIB.py``'s classifier). The code is read, never copied.

:func:`settings` is the spec of an experiment; :func:`resolved_settings` is what the jobs of the paper config
receive for it (the plan's stage configs of the dataset's calibdcd stages, the defaults of the functions those jobs
call, the project's constants), built in-process from the config as written.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import inspect
from dataclasses import dataclass
from pathlib import Path

from mialab.core.paths import REPO
from mialab.pipeline.fidelity import Derived, Find, Setting, argparse_default

#: each detector's environment variable naming a local checkout of its released code
CODE_ENV = {"dpdllm": "DPDLLM_CODE", "veilprobe": "VEILPROBE_CODE"}
RELEASED = {"dpdllm": {"repo": "ZovanZhou/DPDLLM"}, "veilprobe": {"repo": "STAIR-BUPT/VeilProbe"}}
CONFIG = "configs/paper/calibdcd_instruct_models.yaml"
DOCS = REPO / "docs" / "fidelity"
PAPER = {"dpdllm": "CalibDCD (Yang et al. 2026), Tables 2-3: DPDLLM (Zhou et al. 2024)",
         "veilprobe": "CalibDCD (Yang et al. 2026), Tables 2-3: VeilProbe (Hu et al. 2025)"}

# DPDLLM's files
README = "README.md"
TRAIN = "train_detector.py"
GENERATE = "generate_by_llm.py"
DETECT = "run_detection.py"
PREDICT = "predict_result.py"
# VeilProbe's files
AGG = "key_perturb/keyperturb_agg.py"
INTERP = "key_perturb/interpreter.py"
UTILS = "key_perturb/utils.py"
SAMPLE = "sampling_close_sourced_LLM.py"
MAPPING = "mappingmodel.py"
RUN = "run_protonet_classifier.py"
PROTO = "protonetIB.py"

T_C = "tests/test_calibdcd.py::"
T_W = "tests/test_calibdcd_workflow.py::"

#: the length DPDLLM's README passes to every script (``--length``; the scripts have no default)
LENGTH = Find(README, r"python train_detector\.py --dataset \S+ --length (\d+)")
#: keras-nlp's preset of GPT-2 base (124M) is the hub's openai-community/gpt2
KERAS_PRESETS = {"gpt2_base_en": "openai-community/gpt2"}


@dataclass(frozen=True)
class Experiment:
    """One detector on one pool of the paper config, on each of its targets."""

    detector: str
    dataset: str
    models: tuple[str, ...]


def _experiments() -> dict[str, Experiment]:
    import yaml

    section = yaml.safe_load((REPO / CONFIG).read_text())["calibdcd"]
    return {f"calibdcd_{det}_{ds}": Experiment(det, ds, tuple(section["models"]))
            for det in section["detectors"] for ds in section["datasets"]}


EXPERIMENTS = _experiments()


def literal(locator: Find) -> Derived:
    """A Python literal (a list) a :class:`Find` reads as its raw text."""
    return Derived(ast.literal_eval, (locator,))


def hub_ids(owner: str):
    """The code's short hub names (``gpt2``, ``bert-base-cased``) as the hub's canonical ids under ``owner`` (the
    same repositories, renamed when the hub gave its legacy models owners)."""
    return lambda names: ([f"{owner}/{n}" for n in names] if isinstance(names, list) else f"{owner}/{names}")


OTHER_TARGETS = ("CalibDCD's targets (the paper config's instruct models, calibdcd.models) in place of the code's "
                 "own")
SPLIT = ("CalibDCD's protocol fixes the supervised split (partition.n_train_per_class 50 per class, the paper's "
         "Table 1) in place of the detector's own evaluation split")


def settings(name: str) -> list[Setting]:
    """The spec of experiment ``name``: its detector's settings."""
    return dpdllm_settings() if EXPERIMENTS[name].detector == "dpdllm" else veilprobe_settings()


def dpdllm_settings() -> list[Setting]:
    """DPDLLM: the reference fine-tuning (rule calibdcd_reference), the target output and features
    (calibdcd_features), the classifier (calibdcd_calibrate)."""
    ref, feat, cal = "calibdcd_reference", "calibdcd_features", "calibdcd_calibrate"
    return [
        Setting("reference.base_model", ref, Find(TRAIN, r'^\s+"(\w+)", preprocessor=preprocessor',
                                                  after=r"GPT2CausalLM\.from_preset"),
                "reference.base_path", expect=KERAS_PRESETS.get),
        Setting("reference.sequence_length", ref, Derived(lambda _, n: n, (
            Find(TRAIN, r"sequence_length=(args\.length)", raw=True), LENGTH)), "reference.length",
                test=T_C + "test_dpdllm_packing_is_the_keras_gpt2_preprocessors"),
        Setting("reference.texts", ref, Find(TRAIN, r"^\s+return (\{.*\})", raw=True), "constants.reference_texts",
                expect=lambda v: "each split's texts apart" if "test" in v else v,
                reason="one reference per pool, fine-tuned on every pool text (no label read): the texts every "
                       "seed's supervised split, D-cal and evaluation set come from; the code fine-tunes one on its "
                       "train texts and another on its test texts, a split CalibDCD's protocol replaces",
                test=T_W + "test_dpdllm_reference_is_fine_tuned_once_per_pool_and_keys_the_features"),
        Setting("reference.epochs", ref, Find(TRAIN, r"num_epochs = (\d+)"), "reference.finetune.epochs"),
        Setting("reference.batch_size", ref, Find(TRAIN, r"train_dataset\.batch\((\d+)\)"),
                "reference.finetune.batch_size"),
        Setting("reference.shuffle", ref, Find(TRAIN, r"train_dataset = (train_dataset\.batch\(\d+\))", raw=True),
                "constants.reference_shuffle", expect=lambda v: "shuffle" in v),
        Setting("reference.lr", ref, Find(TRAIN, r"^\s+([\d.e-]+),$", after=r"PolynomialDecay\("),
                "reference.finetune.lr"),
        Setting("reference.schedule", ref, Find(TRAIN, r"keras\.optimizers\.schedules\.(\w+)\("),
                "constants.reference_schedule", expect={"PolynomialDecay": "linear"}.get),
        Setting("reference.decay_steps", ref, Find(TRAIN, r"decay_steps=(.+),$", raw=True),
                "constants.reference_decay_steps",
                expect=lambda v: "every step" if v == "train_ds.cardinality() * num_epochs" else v),
        Setting("reference.end_lr", ref, Find(TRAIN, r"end_learning_rate=([^,)]+)"), "constants.reference_end_lr"),
        Setting("reference.optimizer", ref, Find(TRAIN, r"optimizer=keras\.optimizers\.(\w+)\("),
                "constants.reference_optimizer"),
        Setting("reference.optimizer_args", ref, Find(TRAIN, r"optimizer=keras\.optimizers\.Adam\((.*)\),", raw=True),
                "constants.reference_adam",
                expect=lambda v: {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7} if v == "learning_rate" else v),
        Setting("reference.kept_epoch", ref, Derived(
            lambda monitor, mode, best: f"{mode} {monitor}" if best else "last",
            (Find(TRAIN, r"monitor='(\w+)'"), Find(TRAIN, r"mode='(\w+)'"), Find(TRAIN, r"save_best_only=(\w+)"))),
                "constants.reference_kept",
                test=T_C + "test_reference_finetuning_is_seeded_deterministic_and_memorises"),
        Setting("target.model", feat, Find(GENERATE, r'"--llm", type=str, choices=(\[.*\])\)', raw=True), None,
                reason=OTHER_TARGETS),
        Setting("target.prompt_words", feat, Derived(lambda div, n: n // div, (
            Find(GENERATE, r"tokens\[:args\.length // (\d+)\]"), LENGTH)), "dpdllm.prompt_words",
                test=T_C + "test_dpdllm_prompt_is_the_codes_first_words_so_the_features_read_the_target"),
        Setting("target.word_split", feat, Find(GENERATE, r'tokens = text\.split\("(.)"\)', raw=True),
                "constants.dpdllm_word_split"),
        Setting("target.do_sample", feat, Find(GENERATE, r"do_sample=(\w+)"), "dpdllm.sampled"),
        Setting("target.temperature", feat, Find(GENERATE, r"temperature=([\d.]+)"), "dpdllm.temperature"),
        Setting("target.max_new_tokens", feat, Derived(lambda _, n: n, (
            Find(GENERATE, r"max_new_tokens=(args\.length)", raw=True), LENGTH)), "dpdllm.max_new_tokens"),
        Setting("target.response", feat, Find(GENERATE, r'response\[0\]\["(\w+)"\]', raw=True),
                "constants.dpdllm_response", expect=lambda v: "prompt + continuation" if v == "generated_text" else v,
                test=T_W + "test_features_come_from_one_generate_call_per_sampling_setting_and_match_its_outputs"),
        Setting("features.sequence_length", feat, Derived(lambda _, n: n, (
            Find(DETECT, r"sequence_length=(args\.length)", raw=True), LENGTH)), "dpdllm.length"),
        Setting("features.metric", feat, argparse_default(PREDICT, "--metric"), "constants.dpdllm_feature",
                test=T_C + "test_reference_probabilities_match_a_direct_forward_pass"),
        Setting("features.func", feat, argparse_default(PREDICT, "--func"), "constants.dpdllm_processing"),
        Setting("classifier.model", cal, Find(PREDICT, r"^clf = (\w+)\(\)"), "classifier.dpdllm",
                expect={"GaussianNB": "gaussian_nb"}.get,
                test=T_C + "test_classifiers_score_probabilities_and_reject_bad_input"),
        Setting("classifier.score", cal, Find(PREDICT, r"^test_pred = clf\.(\w+)\(test_X\)"),
                "constants.dpdllm_score",
                reason="the member probability (predict_proba) is scored: AUROC and TPR at 5% FPR need a score, "
                       "and the code's AUC of hard 0/1 predictions has two levels only"),
        Setting("classifier.train_texts", cal, Find(PREDICT, r'process_data\(_load_sub_data\("(\w+)"\)'), None,
                reason=SPLIT),
    ]


def veilprobe_settings() -> list[Setting]:
    """VeilProbe: the key-token perturbation (rule calibdcd_perturbation), the target output (calibdcd_features),
    the mapping models (calibdcd_veilprobe), the pruning and prototypical network (calibdcd_calibrate)."""
    pert, feat, mapping, cal = "calibdcd_perturbation", "calibdcd_features", "calibdcd_veilprobe", "calibdcd_calibrate"
    enc, dec = r"encoder_config = BertConfig\(", r"decoder_config = BertConfig\("

    def bert(key: str, after: str) -> Find:
        return Find(MAPPING, rf"^\s+{key}=([\d.]+),?$", after=after)

    return [
        Setting("perturbation.key_token_models", pert, literal(Find(AGG, r"^model_names = (\[.*\])", raw=True)),
                "perturbation.key_token_paths", expect=hub_ids("openai-community")),
        Setting("perturbation.template", pert, Derived(
            lambda name, prefix, postfix: f"{prefix}{{text}}{postfix}" if name == "competion_templete" else name,
            (Find(UTILS, r"^\s+'gpt2': (\w+),"),
             Find(UTILS, r"^\s+'prefix': \"(.*)\",", after=r"competion_templete = \{", raw=True),
             Find(UTILS, r"^\s+'postfix': \"(.*)\"", after=r"competion_templete = \{", raw=True))),
                "constants.perturbation_template"),
        Setting("perturbation.distance", pert, Find(AGG, r'interpret_ours\(.*"(\w+)"\)'), "perturbation.perturbation",
                expect={"optimal_transport": "original"}.get),
        Setting("perturbation.beams", pert, Find(AGG, r"^\s+beams = (\d+)"), "perturbation.beams"),
        Setting("perturbation.new_tokens", pert, Find(AGG, r"^\s+max_new_tokens = (\d+)"), "perturbation.new_tokens"),
        Setting("perturbation.beam_sampling", pert, Find(INTERP, r"^\s+do_sample=(\w+),", after=r"def interpret_ours"),
                "constants.beam_sampling"),
        Setting("perturbation.ot_topk", pert, Find(INTERP, r"def _topp_intersection\(.*topk=(\d+)"),
                "perturbation.ot_topk"),
        Setting("perturbation.ot_topp", pert, Find(INTERP, r"def _topp_intersection\(.*topp=([\d.]+)"),
                "perturbation.ot_topp"),
        Setting("perturbation.ipot_beta", pert, Find(INTERP, r"def _ipot_torch\(.*beta=([\d.]+)"),
                "perturbation.ipot_beta"),
        Setting("perturbation.ipot_iterations", pert, Find(INTERP, r"def _ipot_torch\(.*max_iter=(\d+)"),
                "perturbation.ot_iterations"),
        Setting("perturbation.ipot_inner_steps", pert, Find(INTERP, r"def _ipot_torch\(.*\bL=(\d+)"),
                "constants.ipot_inner_steps"),
        Setting("perturbation.candidates_per_model", pert,
                Find(AGG, r"def compute_attributions_for_sentence\(.*top_k=(\d+)\)"), "perturbation.top_k"),
        Setting("perturbation.key_tokens", pert, Find(AGG, r"choose_token_num = (\d+)"), "perturbation.keep"),
        Setting("perturbation.mlm_model", pert, Find(AGG, r"^modified_model_name = '([^']+)'"),
                "perturbation.mlm_path", expect=hub_ids("google-bert")),
        Setting("perturbation.fill_top", pert, Find(AGG, r"for pred in predictions\[:(\d+)\]"),
                "perturbation.fill_top"),
        Setting("perturbation.fill_filter", pert, Find(AGG, r're\.compile\(r"(.*)"\)', raw=True),
                "constants.fill_token",
                expect=lambda v: f"[{v[2:-1]}]+" if v.startswith("[^") else v),
        Setting("target.model", feat, Find(SAMPLE, r'^\s+model="([^"]+)"'), None, reason=OTHER_TARGETS),
        Setting("target.query", feat, Find(SAMPLE, r'^\s+"Prefix": (\w+),', raw=True), "perturbation.query",
                expect=lambda v: "text" if v == "item" else v,
                test=T_W + "test_veilprobe_queries_the_whole_text_by_default"),
        Setting("target.temperature", feat, Find(SAMPLE, r"^\s+temperature=([\d.]+)"), "veilprobe.temperature"),
        Setting("target.max_tokens", feat, Derived(lambda _, n: n, (
            Find(SAMPLE, r"max_tokens=(max_length)", raw=True), Find(SAMPLE, r"text_out\(.*max_length=(\d+)\)"))),
                "veilprobe.max_new_tokens"),
        Setting("target.generations", feat, Find(SAMPLE, r"num_generations = (\d+)"), "veilprobe.continuations",
                reason="three continuations per text, as the mapping script that trained the models reads "
                       "(Generate1-3, mapping.pairs_per_text): the released sampler's one (its Generate1 column) "
                       "cannot feed that script, which fails on the missing Generate2",
                test=T_W + "test_veilprobe_trains_a_mapping_pair_per_distinct_continuation"),
        Setting("mapping.encoder.hidden_size", mapping, bert("hidden_size", enc), "mapping.hidden_size"),
        Setting("mapping.encoder.num_attention_heads", mapping, bert("num_attention_heads", enc), "mapping.num_heads"),
        Setting("mapping.encoder.num_hidden_layers", mapping, bert("num_hidden_layers", enc), "mapping.num_layers"),
        Setting("mapping.encoder.intermediate_size", mapping, bert("intermediate_size", enc),
                "mapping.intermediate_size"),
        Setting("mapping.encoder.max_position_embeddings", mapping, bert("max_position_embeddings", enc),
                "mapping.max_length"),
        Setting("mapping.encoder.hidden_dropout_prob", mapping, bert("hidden_dropout_prob", enc), "mapping.dropout"),
        Setting("mapping.encoder.attention_probs_dropout_prob", mapping, bert("attention_probs_dropout_prob", enc),
                "mapping.dropout"),
        Setting("mapping.decoder.hidden_size", mapping, bert("hidden_size", dec), "mapping.hidden_size"),
        Setting("mapping.decoder.num_attention_heads", mapping, bert("num_attention_heads", dec), "mapping.num_heads"),
        Setting("mapping.decoder.num_hidden_layers", mapping, bert("num_hidden_layers", dec), "mapping.num_layers"),
        Setting("mapping.decoder.intermediate_size", mapping, bert("intermediate_size", dec),
                "mapping.intermediate_size"),
        Setting("mapping.tokenizer", mapping, Find(MAPPING, r'BertTokenizer\.from_pretrained\("([^"]+)"\)'),
                "mapping.tokenizer",
                reason="the same vocabulary (bert-base-uncased's WordPiece) from the packaged all-MiniLM-L6-v2 "
                       "tokenizer, read offline"),
        Setting("mapping.max_length", mapping, Find(MAPPING, r"def preprocess_data\(.*max_length=(\d+)\)"),
                "mapping.max_length"),
        Setting("mapping.lr", mapping, Find(MAPPING, r"learning_rate=([\d.e-]+),"), "mapping.lr",
                test=T_C + "test_mapping_model_training_is_seeded_and_deterministic"),
        Setting("mapping.batch_size", mapping, Find(MAPPING, r"per_device_train_batch_size=(\d+),"),
                "mapping.batch_size"),
        Setting("mapping.weight_decay", mapping, Find(MAPPING, r"weight_decay=([\d.e-]+),"), "mapping.weight_decay"),
        Setting("mapping.epochs", mapping, Find(MAPPING, r"train_seq2seq\(.*num_epochs=(\d+)\)"), "mapping.epochs"),
        Setting("mapping.seed", mapping, Find(MAPPING, r"^\s+set_seed\((\d+)\)"), "mapping.seed"),
        Setting("mapping.pairs_per_text", mapping,
                Derived(len, (literal(Find(MAPPING, r"for col in (\[.*\]):", raw=True)),)), "veilprobe.continuations",
                test=T_W + "test_veilprobe_trains_a_mapping_pair_per_distinct_continuation"),
        Setting("mapping.perturbed_model_is_original", mapping, Derived(lambda a, b: a == b, (
            Find(RUN, r"^\s+model1_path = '([^']+)'"), Find(RUN, r"^\s+model_perturb_path = '([^']+)'"))),
                "constants.one_mapping_model",
                reason="a second mapping model trained on the perturbed pairs, as VeilProbe's paper describes; the "
                       "run script loads one path for both models, by mistake (the perturbed features then read the "
                       "original pairs' model)",
                test=T_W + "test_veilprobe_tables_train_on_the_original_query_and_read_every_scopes_queries"),
        Setting("classifier.split", cal, Find(RUN, r"^\s+test_size = ([\d.]+)"), None, reason=SPLIT),
        Setting("classifier.prune_p", cal, Find(RUN, r"def prune_features\(.*p_threshold=([\d.]+)\)"),
                "classifier.prune_p"),
        Setting("classifier.welch", cal, Find(RUN, r"equal_var=(\w+)"), "constants.equal_var"),
        Setting("classifier.hidden_dim", cal, Find(RUN, r"hidden_dim=(\d+),"), "protonet.hidden_dim"),
        Setting("classifier.bottleneck_dim", cal, Find(RUN, r"bottleneck_dim=(\d+),"), "protonet.bottleneck_dim"),
        Setting("classifier.epochs", cal, Find(RUN, r"proto_net\.train\((\d+),"), "protonet.epochs"),
        Setting("classifier.episodes_per_epoch", cal, Find(RUN, r"proto_net\.train\(\d+, (\d+),"),
                "protonet.episodes_per_epoch"),
        Setting("classifier.k_way", cal, Find(PROTO, r"K_way = (\d+)"), "constants.k_way"),
        Setting("classifier.n_shot", cal, Find(PROTO, r"N_shot = (\d+)"), "protonet.n_shot"),
        Setting("classifier.n_query", cal, Find(PROTO, r"N_query = (\d+)"), "protonet.n_query"),
        Setting("classifier.optimizer", cal, Find(PROTO, r"torch\.optim\.(\w+)\(self\.feature_extractor"),
                "constants.protonet_optimizer"),
        Setting("classifier.lr", cal, Find(PROTO, r"torch\.optim\.Adam\(.*lr=([\d.e-]+)\)"), "protonet.lr",
                test=T_C + "test_prototypical_network_is_deterministic_under_a_seed"),
        Setting("classifier.weight_decay", cal, Find(PROTO, r"torch\.optim\.Adam\(.*weight_decay=([\d.e-]+),"),
                "protonet.weight_decay"),
        Setting("classifier.ib_beta", cal, Find(PROTO, r"def bottleneck_loss\(self, z, beta=([\d.e-]+)\)"),
                "protonet.ib_beta"),
    ]


# -- the project's side ----------------------------------------------------------------------------------
def default_of(function, parameter: str):
    return inspect.signature(function).parameters[parameter].default


def prompt_words(length: int, prompt: str) -> int:
    """How many words of a text DPDLLM's prompt keeps in the project (``mialab.calibdcd.extract.dpdllm_prompts`` run
    on a text of ``4 * length`` distinct words whose prefix is empty)."""
    import pandas as pd

    from mialab.calibdcd.extract import dpdllm_prompts

    text = " ".join(f"w{i}" for i in range(4 * length))
    (kept,) = dpdllm_prompts(pd.DataFrame({"text": [text], "prefix": [""]}), length=length, prompt=prompt)
    return len(kept.split(" ")) if kept else 0


def paper_config() -> dict:
    """The paper config as the workflow reads it: validated against the schema, defaults filled in."""
    import yaml

    from mialab.pipeline.config import validate_config

    config = yaml.safe_load((REPO / CONFIG).read_text())
    validate_config(config)
    return config


def resolved_settings(config: dict, name: str) -> dict:
    """What the jobs of experiment ``name`` receive from ``config`` (validated, defaults filled): the stage configs of
    its dataset's reference, perturbation, features (every target's: one config) and VeilProbe mapping jobs, the
    defaults of the functions those jobs call with them, the classifiers' settings and the project's constants."""
    from mialab.calibdcd.calibrate import DETECTORS
    from mialab.calibdcd.classifiers import PRUNE_P, ProtoNetConfig
    from mialab.calibdcd.perturb import FILL_TOKEN, ipot, mlm_fill, original_key_token_perturb, topp_union
    from mialab.calibdcd.plan import CalibDCDPlan
    from mialab.pipeline.plan import Plan

    e = EXPERIMENTS[name]
    plan = Plan(config)
    calib = CalibDCDPlan(plan, config)
    path = lambda model: config["models"][model]["path"] if model in config["models"] else model  # noqa: E731
    # one features and one mapping config for every target (CalibDCDPlan.detector_specs reads no model)
    detectors = calib.features(e.models[0], e.dataset, "original").manifest["config"]["detectors"]
    reference = calib.reference(e.dataset).manifest
    perturbation = calib.perturbation(e.dataset).manifest["config"]
    spec = config["calibdcd"]["detectors"]
    dpdllm = detectors["dpdllm"]
    return {
        "reference": {**reference, "base_path": path(reference["base"]["model"])},
        "dpdllm": {**dpdllm, "sampled": dpdllm["temperature"] > 0,
                   "prompt_words": prompt_words(dpdllm["length"], dpdllm["prompt"])},
        "perturbation": {
            **perturbation, "key_token_paths": [path(m["model"]) for m in perturbation["key_token_models"]],
            "mlm_path": perturbation["mlm_model"]["path"],
            "top_k": default_of(original_key_token_perturb, "top_k"),
            "keep": default_of(original_key_token_perturb, "keep"),
            "ot_topp": default_of(topp_union, "topp"), "ipot_beta": default_of(ipot, "beta"),
            "fill_top": default_of(mlm_fill, "top"),
        },
        "veilprobe": detectors["veilprobe"],
        "mapping": calib.veilprobe(e.models[0], e.dataset).manifest["config"]["mapping"],
        "classifier": {det: DETECTORS[det].classifier for det in spec}
        | {"prune_p": PRUNE_P},
        "protonet": dataclasses.asdict(ProtoNetConfig()),
        "constants": {
            "reference_texts": "every pool text", "reference_shuffle": False,   # mialab.calibdcd.reference
            "reference_schedule": "linear", "reference_decay_steps": "every step", "reference_end_lr": 0.0,
            "reference_optimizer": "Adam", "reference_adam": {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7},
            "reference_kept": "min perplexity",
            "dpdllm_word_split": " ", "dpdllm_response": "prompt + continuation",   # mialab.calibdcd.extract
            "dpdllm_feature": "cond_prob", "dpdllm_processing": "original", "dpdllm_score": "predict_proba",
            "perturbation_template": "{text}", "beam_sampling": False, "ipot_inner_steps": 1,
            "fill_token": FILL_TOKEN.pattern,
            "one_mapping_model": False,    # mialab.calibdcd.mapping: the original and the perturbed pairs' models
            "equal_var": False, "k_way": 2, "protonet_optimizer": "Adam",   # mialab.calibdcd.classifiers
        },
    }


def experiment_header(name: str) -> dict:
    """The document's header: the experiment, its paper and config, its detector, dataset and targets, the code."""
    e = EXPERIMENTS[name]
    return {"experiment": name, "paper": PAPER[e.detector], "config": CONFIG,
            "models": {"detector": e.detector, "dataset": e.dataset, "targets": list(e.models)},
            "released_code": dict(RELEASED[e.detector])}


def document_path(name: str) -> Path:
    return DOCS / f"{name}.yaml"


def documents(checkout: dict[str, Path] | None = None) -> dict[str, dict]:
    """Every experiment's reference document: read from its detector's checkout of the released code (``checkout``:
    detector -> path) and the paper config, or, for a detector without one, the committed document with its project
    side refreshed from the config."""
    from mialab.pipeline.fidelity import load, reference, refresh

    config = paper_config()
    out = {}
    for name, e in EXPERIMENTS.items():
        resolved = resolved_settings(copy.deepcopy(config), name)
        code = (checkout or {}).get(e.detector)
        out[name] = (refresh(load(document_path(name)), settings(name), resolved) if code is None
                     else reference(experiment_header(name), settings(name), code, resolved))
    return out
