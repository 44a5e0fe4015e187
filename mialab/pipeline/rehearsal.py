"""CPU rehearsal of a paper config (``--config rehearsal=true``): the same experiment, only smaller.

:func:`rehearse` swaps sizes and nothing else:

- every hub model (``kind: hf`` paths, and the models a method section names by hub id, e.g. an
  embedding model) becomes a tiny stand-in of the same architecture class with the same special
  tokens and chat template (``resources/rehearsal/models.yaml``), a folder that rule
  ``rehearsal_model`` builds under ``results/rehearsal/models/<name>/<key>/model``;
- every hub dataset, fetched file and missing local data file becomes a local sample with the same columns
  (``resources/rehearsal/datasets.yaml``), so a rehearsal downloads nothing;
- counts shrink to what 2 CPU cores run in minutes (:func:`shrink_caps`; one seed, the first), devices
  become the CPU, and vLLM backends become the hf backend where the vLLM worker's environment has no
  working vLLM;
- settings a method needs for stand-ins besides sizes (:func:`rehearsal_settings`: e.g. a fallback where a
  stand-in's answer stays invalid, since random weights follow no instruction).

Each method declares its own part of these (its ``rehearsal``: :class:`mialab.pipeline.methods.Swaps`); the
pipeline's own keys are the ``OWN_`` tables here.

Rules, settings, prompts, rewards, metrics and reports stay the paper config's. The plan-time
cluster checks run on the paper config before this (rules/common.smk).
"""

from __future__ import annotations

import copy
import functools
import os
import re
from itertools import takewhile
from pathlib import Path
from typing import Any, Iterator

import yaml

from mialab.core.paths import RESOURCES
from mialab.data.sources import GITHUB_RAW, file_url, is_file, is_hub
from mialab.data.registry import config_schema
from mialab.pipeline.cluster_checks import worker_problem, worker_vllm
from mialab.pipeline.methods import methods
from mialab.pipeline.plan import LAYOUTS, Plan, Stage, source_fingerprint, stable_hash

TABLES = RESOURCES / "rehearsal"
# the stand-ins' folder under the results folder (<name>/<key>/model below it): the rehearsal stage's layout
# up to its first wildcard
STAND_INS = "/".join(("rehearsal", *takewhile(lambda part: "{" not in part, LAYOUTS["rehearsal"])))
# what every stand-in's tokenizer is trained on (the repository's own text)
TOKENIZER_CORPUS = ["resources/data/tinyshakespeare/input.txt", "resources/data/aime/aime_1983_2023.json",
                    "resources/data/wikimia/WikiMIA_length64.parquet"]
LOCAL_ENCODERS = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")  # packaged, offline already
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")

# config keys (``*``: any name) capped at a CPU size: a value above the cap becomes the cap (the pipeline's; each
# method's: its Swaps.shrink)
OWN_SHRINK: dict[str, int] = {
    "datasets.*.split.n_per_class": 8,
    "datasets.*.pool.min_tokens": 16,
    "models.*.train.effective_batch_size": 4,
    "models.*.train.micro_batch_size": 2,
    "models.*.train.max_length": 256,
    "models.*.train.batch_size": 4,
    "models.*.train.grad_accum": 1,
    "models.*.train.steps_per_generation": 1,
    "models.*.train.num_generations": 2,
    "models.*.train.max_prompt_length": 128,
    "models.*.train.max_completion_length": 16,
    "models.*.corpus.size": 24,
    "scoring.max_length": 256,
    "datasets.*.paraphrase.options.max_new_tokens": 16,
    "launch.nproc": 1,
}
OWN_DEVICES = ("scoring.device",)
# keys naming a compute precision: on the CPU a paper config's bf16 (or fp16) becomes auto (bf16 where the CPU computes
# it natively, AMX / AVX512-BF16; fp32 where it would be emulated, tens of times slower)
PRECISION_KEYS = ("dtype", "precision", "embedding_dtype")
# generation sections: (the key naming their backend, the key of its options); vllm -> hf where the vLLM
# worker's environment has no working vLLM, keeping the options the hf backend takes (hf_options)
OWN_BACKENDS = {"datasets.*.paraphrase": ("backend", "options")}
# keys naming a model by hub id outside the models section (an encoder, a scorer, a pool's token counter):
# their stand-ins are inputs of every models-section stand-in, so each stage reading one that also reads a
# model runs after it; rules build_pool, paraphrase and paraphrase_pool list theirs (rules/common.smk: stand_ins_of)
OWN_MODEL_KEYS = ("leakage.embedding_model", "datasets.*.pool.tokenizer", "datasets.*.paraphrase.options.model")
DATA_KEYS = ["datasets.*.pool.source", "datasets.*.pool.nonmember_source", "models.*.filler"]


def _merged(attribute: str, own):
    """The pipeline's ``own`` table and every method's Swaps ``attribute``, as one (a dict or a tuple)."""
    parts = [own, *(getattr(m.rehearsal, attribute) for m in methods())]
    if isinstance(own, dict):
        return {k: v for part in parts for k, v in part.items()}
    return tuple(k for part in parts for k in part)


def shrink_caps() -> dict[str, int]:
    """Every config key capped at a CPU size (``*``: any name), and its cap."""
    return _merged("shrink", OWN_SHRINK)


def devices() -> tuple[str, ...]:
    """Every config key naming a device (the CPU in a rehearsal)."""
    return _merged("devices", OWN_DEVICES)


def backends() -> dict[str, tuple[str, str]]:
    """Every generation section (``*``: any name): (the key naming its backend, the key of its options)."""
    return _merged("backends", OWN_BACKENDS)


def model_keys() -> tuple[str, ...]:
    """Every key naming a model by hub id outside the models section."""
    return _merged("model_keys", OWN_MODEL_KEYS)


def rehearsal_settings() -> dict:
    """The settings a rehearsal needs besides sizes (key: value)."""
    return _merged("settings", {})


class RehearsalError(ValueError):
    """A paper config names a model or dataset the rehearsal has no stand-in for."""


@functools.lru_cache(maxsize=None)
def table(name: str) -> dict:
    """``resources/rehearsal/<name>.yaml`` (models: families and templates; datasets: the samples)."""
    return yaml.safe_load((TABLES / f"{name}.yaml").read_text(encoding="utf-8"))


# -- walking config keys ------------------------------------------------------------------------
def matches(config: dict, pattern: str) -> Iterator[tuple[str, dict, str]]:
    """(dotted key, parent mapping, last key) of every present key matching ``pattern`` (``*``: any name)."""

    def walk(node: Any, parts: list[str], done: list[str]):
        if not isinstance(node, dict):
            return
        head, rest = parts[0], parts[1:]
        for k in (list(node) if head == "*" else [head]):
            if k not in node:
                continue
            if rest:
                yield from walk(node[k], rest, done + [str(k)])
            else:
                yield ".".join(done + [str(k)]), node, k

    yield from walk(config, pattern.split("."), [])


def changes(before: Any, after: Any, where: str = "") -> list[str]:
    """``key: old -> new`` for every value that differs (added / removed keys included)."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for k in list(before) + [k for k in after if k not in before]:
            key = f"{where}.{k}" if where else str(k)
            out += changes(before.get(k, "<absent>"), after.get(k, "<absent>"), key)
        return out
    return [] if before == after else [f"{where}: {before!r} -> {after!r}"]


# -- models -------------------------------------------------------------------------------------
def stand_in_name(hub: str) -> str:
    """The folder name of a hub model's stand-in (``org--name``)."""
    return hub.replace("/", "--")


def stand_in_spec(hub: str, key: str) -> dict:
    """What rule ``rehearsal_model`` builds for hub model ``hub`` (named at config key ``key``)."""
    models = table("models")
    family = models["models"].get(hub)
    if family is None:
        raise RehearsalError(f"{key}: hub model {hub!r} has no rehearsal stand-in; add it to "
                             f"{TABLES / 'models.yaml'} (known: {', '.join(models['models'])})")
    fam = models["families"][family]
    return {"hub": hub, "family": family, **fam, "size": models["size"],
            "chat_template": models["templates"][fam["template"]] if "template" in fam else None}


def stand_in_stage(plan: Plan, hub: str, key: str = "rehearsal") -> Stage:
    """The content-addressed stand-in of ``hub``: its spec and the tokenizer corpus (its version:
    :data:`mialab.pipeline.plan.STAGE_VERSIONS`)."""
    spec = stand_in_spec(hub, key)
    return plan.stage("rehearsal", {"name": stand_in_name(hub)}, {
        "spec": spec, "corpus": source_fingerprint(TOKENIZER_CORPUS, plan.hash_cache)})


def is_hub_model(value: Any, config: dict) -> bool:
    """A hub model id (not a configured model name, a local folder or the packaged encoder)."""
    return (isinstance(value, str) and value not in config["models"] and value not in LOCAL_ENCODERS
            and not os.path.isdir(value) and bool(HUB_ID.match(value)))


def swap_models(config: dict, plan: Plan) -> None:
    """Point every hub model at its stand-in folder (in place)."""
    for name, spec in config["models"].items():
        if spec["kind"] == "hf" and is_hub_model(spec["path"], config):
            spec["path"] = stand_in_stage(plan, spec["path"], f"models.{name}.path").path("model")
            spec.pop("revision", None)  # a hub revision: the stand-in's key is its content
    for pattern in model_keys():
        for key, parent, last in list(matches(config, pattern)):
            if is_hub_model(parent[last], config):
                parent[last] = stand_in_stage(plan, parent[last], key).path("model")


def stand_in_paths(config: Any) -> set[str]:
    """Every stand-in folder a (rehearsed) config names."""
    if isinstance(config, dict):
        return set().union(*map(stand_in_paths, config.values())) if config else set()
    if isinstance(config, list):
        return set().union(*map(stand_in_paths, config)) if config else set()
    return {config} if isinstance(config, str) and f"/{STAND_INS}/" in f"/{config}" else set()


# -- data ---------------------------------------------------------------------------------------
def sample_of(table_entry: Any, key: str) -> Any:
    """The local sample of one table (a local path, ``{hub: ...}``, or a file source, by its URL); an existing
    local path is kept."""
    samples = table("datasets")
    if is_hub(table_entry):
        found = samples["hub"].get(table_entry["hub"])
        what = f"hub dataset {table_entry['hub']!r}"
    elif is_file(table_entry):
        url = file_url(table_entry, base=GITHUB_RAW)
        found, what = samples["file"].get(url), f"file {url}"
    elif isinstance(table_entry, str):
        if os.path.exists(table_entry):
            return table_entry
        found, what = samples["path"].get(table_entry), f"missing local file {table_entry!r}"
    else:
        return table_entry
    if found is None:
        raise RehearsalError(f"{key}: {what} has no rehearsal sample; add it to {TABLES / 'datasets.yaml'}")
    return found


def sampled(source: Any, key: str) -> Any:
    """A source (a table, ``{source, year}``, a corpus ``{source, columns}``, a list) with samples swapped in."""
    if isinstance(source, list):
        return [sampled(s, f"{key}[{i}]") for i, s in enumerate(source)]
    if isinstance(source, dict) and "source" in source:
        return {**source, "source": sample_of(source["source"], f"{key}.source")}
    return sample_of(source, key)


def with_samples(config: dict) -> dict:
    """``config`` with every hub dataset, fetched file and missing local data file swapped for its local sample."""
    out = copy.deepcopy(config)
    for pattern in DATA_KEYS:
        for key, parent, last in list(matches(out, pattern)):
            parent[last] = sampled(parent[last], key)
    return out


# -- sizes, devices, backends ---------------------------------------------------------------------
def shrink(config: dict) -> None:
    """Cap every key of :func:`shrink_caps` and keep the first seed (in place); then each method keeps the ratios
    its caps must not change (its Swaps.rescale, e.g. LoRA's alpha / r)."""
    paper = copy.deepcopy(config)
    config["seeds"] = config["seeds"][:1]
    for pattern, cap in shrink_caps().items():
        for _, parent, last in matches(config, pattern):
            if isinstance(parent[last], bool) or not isinstance(parent[last], int) or parent[last] > cap:
                parent[last] = cap
    for method in methods():
        if method.rehearsal.rescale is not None:
            method.rehearsal.rescale(paper, config)


def cpu_only(config: dict, vllm_available: bool) -> None:
    """Devices to the CPU, bf16 and fp16 to ``auto`` (:data:`PRECISION_KEYS`); vLLM backends to hf when vLLM is not
    importable (in place)."""
    for pattern in devices():
        for _, parent, last in matches(config, pattern):
            parent[last] = "cpu"

    def native(node: Any) -> None:
        for key, value in (node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list)
                           else ()):
            if key in PRECISION_KEYS and value in ("bf16", "bfloat16", "float16"):
                node[key] = "auto"
            else:
                native(value)

    native(config)
    for section, (backend, options) in backends().items():
        for _, parent, last in matches(config, f"{section}.{backend}"):
            if parent[last] == "vllm" and not vllm_available:
                parent[last] = "hf"
                parent[options] = {k: v for k, v in parent.get(options, {}).items() if k in hf_options(section)}
            if parent[last] == "hf":
                parent.setdefault(options, {})["device"] = "cpu"


def hf_options(section: str) -> set[str]:
    """The options the hf backend of ``section`` takes, as the schema closes them: the engine's hf options
    (``$defs/engines/hf``) and a paraphraser's own (``$defs/paraphrase_options/llm``)."""
    defs = config_schema()["$defs"]
    keys = set(defs["engines"]["hf"]["properties"])
    if section == "datasets.*.paraphrase":
        keys |= set(defs["paraphrase_options"]["llm"]["properties"])
    return keys


def vllm_works() -> bool:
    """Whether a ``vllm`` backend's job finds a working vLLM where it imports it (the worker's environment)."""
    venv, version = worker_vllm()
    return worker_problem(version, venv) is None


def rehearsal_log(paper: dict, rehearsed: dict) -> list[str]:
    """What a rehearsal changed, one line a key, and why a vLLM backend became hf."""
    lines = changes(paper, rehearsed)
    if any(re.search(r"\.(backend|engine): 'vllm' -> 'hf'", line) for line in lines):
        lines.insert(0, f"no working vLLM in the generation worker's environment ({worker_vllm()[0]}): vllm "
                        "generation backends run on hf")
    return lines


def rehearsing(config: dict) -> bool:
    """Whether ``config`` asks for a rehearsal (``--config rehearsal=true``)."""
    return config.get("rehearsal") is True


def rehearse(config: dict, *, vllm_available: bool | None = None, results: str = "results") -> dict:
    """The CPU rehearsal of ``config`` (validated, defaults filled): stand-in models, data samples,
    CPU sizes and devices; everything else unchanged. Pure: returns a new config."""
    out = with_samples(config)
    out["rehearsal"] = True
    swap_models(out, Plan(out, results=results))
    shrink(out)
    cpu_only(out, vllm_works() if vllm_available is None else vllm_available)
    for pattern, value in rehearsal_settings().items():
        for _, parent, last in matches(out, pattern):
            parent[last] = value
    return out


class RehearsalPlan(Plan):
    """The plan of a rehearsed config: each stand-in folder is a built stage (rule ``rehearsal_model``)
    that the stages reading it wait for, keyed by its address (whose key determines its content), so
    a key is the same before and after the folder exists."""

    def __init__(self, config: dict, results: str = "results", hash_cache: str | None = None):
        super().__init__(config, results=results, hash_cache=hash_cache)
        self.stand_ins: dict[tuple[str, str], Stage] = {}
        by_name = {stand_in_name(h): h for h in table("models")["models"]}
        for path in sorted(stand_in_paths(config)):
            name, key = Path(path).parts[-3:-1]
            stage = stand_in_stage(self, by_name.get(name, name.replace("--", "/")))
            if stage.path("model") != path:
                raise RehearsalError(f"{path}: not the current stand-in of {by_name.get(name, name)} "
                                     f"({stage.path('model')}); rehearse the paper config again")
            self.stand_ins[(name, key)] = stage

    def is_stand_in(self, path: str) -> bool:
        return path in {s.path("model") for s in self.stand_ins.values()}

    def is_built(self, name: str) -> bool:
        spec = self.model_spec(name)
        return super().is_built(name) or self.is_stand_in(spec["path"])

    def _given_model(self, spec: dict) -> Stage:
        if self.is_stand_in(spec["path"]):
            return Stage("models", stable_hash({"rehearsal": spec["path"]}), spec["path"],
                         {"kind": "hf", "path": spec["path"], "rehearsal": True})
        return super()._given_model(spec)

    def unpinned(self) -> list[str]:
        """The base warnings, less those of stand-ins (their key is their content)."""
        return [w for w in super().unpinned() if f"/{STAND_INS}/" not in w]

    def detached(self) -> list[str]:
        """The stand-ins named outside the models section (built before those of the models section)."""
        models = {spec.get("path") for spec in self.config["models"].values()}
        return sorted(s.path("model") for s in self.stand_ins.values() if s.path("model") not in models)


# -- building a stand-in (rule rehearsal_model) ---------------------------------------------------
def train_tokenizer(spec: dict, texts):
    """Byte-level BPE (a ``wordpiece`` family: BERT's cased WordPiece, ``[CLS] $A [SEP]``) with the family's
    special tokens and chat template, as a fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from mialab.lm.tiny import wordpiece_tokenizer

    tokens = dict(spec["tokens"])
    extra = tokens.pop("extra", [])
    if spec.get("wordpiece"):
        tok = wordpiece_tokenizer(texts, spec["size"]["vocab_size"], tokens, extra)
    else:
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        special = list(dict.fromkeys([*tokens.values(), *extra]))
        tok.train_from_iterator(texts, trainer=trainers.BpeTrainer(
            vocab_size=spec["size"]["vocab_size"], min_frequency=2, special_tokens=special,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    around = [tokens[f"{end}_token"] for end in ("bos", "eos") if spec.get(f"add_{end}")]
    if around:  # bos before each sequence, eos after it, as the family's tokenizer adds them
        head = f"{tokens['bos_token']} " if spec.get("add_bos") else ""
        tail = f" {tokens['eos_token']}" if spec.get("add_eos") else ""
        tok.post_processor = processors.TemplateProcessing(
            single=f"{head}$A{tail}", pair=f"{head}$A{tail} {head}$B{tail}",
            special_tokens=[(t, tok.token_to_id(t)) for t in dict.fromkeys(around)])
    side = "left" if spec.get("encoder") == "lasttoken" else "right"
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, additional_special_tokens=extra, padding_side=side, **tokens)
    if spec["chat_template"]:
        fast.chat_template = spec["chat_template"]
    return fast


def model_config(spec: dict, tokenizer):
    """The family's transformers config at the stand-in size, with the tokenizer's special ids."""
    import transformers

    from mialab.lm.tiny import bert_config

    size = spec["size"]
    ids = {f"{role}_token_id": getattr(tokenizer, f"{role}_token_id")
           for role in ("bos", "eos", "pad") if getattr(tokenizer, f"{role}_token_id") is not None}
    if spec["class"] == "BertForMaskedLM":
        return bert_config(len(tokenizer), hidden_size=size["hidden_size"], num_layers=size["num_layers"],
                           num_heads=size["num_heads"], intermediate_size=size["intermediate_size"],
                           max_position_embeddings=size["max_position_embeddings"], tokenizer=tokenizer)
    if spec["class"] == "GPT2LMHeadModel":
        return transformers.GPT2Config(vocab_size=len(tokenizer), n_embd=size["hidden_size"], n_layer=size["num_layers"],
                                       n_head=size["num_heads"], n_inner=size["intermediate_size"],
                                       n_positions=size["max_position_embeddings"], **ids)
    config_class = getattr(transformers, spec["class"]).config_class
    return config_class(vocab_size=len(tokenizer), hidden_size=size["hidden_size"],
                        intermediate_size=size["intermediate_size"], num_hidden_layers=size["num_layers"],
                        num_attention_heads=size["num_heads"], num_key_value_heads=spec["kv_heads"],
                        max_position_embeddings=size["max_position_embeddings"], **ids)


def build_stand_in(spec: dict, out: str | os.PathLike, texts) -> int:
    """Write the stand-in of ``spec`` into folder ``out`` (safetensors); returns its parameter count."""
    import torch
    import transformers

    tok = train_tokenizer(spec, texts)
    torch.manual_seed(spec["size"]["seed"])
    model = getattr(transformers, spec["class"])(model_config(spec, tok))
    if tok.pad_token_id is not None:  # the pad row starts at zero; a released model's pad (often eos) is trained
        embeddings = model.get_input_embeddings().weight
        with torch.no_grad():
            embeddings[tok.pad_token_id].normal_(std=float(embeddings.std()))
    if spec.get("encoder"):
        import tempfile

        from sentence_transformers import SentenceTransformer
        from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

        with tempfile.TemporaryDirectory() as hf_dir:  # the bare transformer, read back as the first module
            model.save_pretrained(hf_dir, safe_serialization=True)
            tok.save_pretrained(hf_dir)
            # read back with hub kernels off, as every model load (mialab.lm.loading.load_pretrained)
            modules = [Transformer(hf_dir, model_kwargs={"use_kernels": False}),
                       Pooling(spec["size"]["hidden_size"], pooling_mode=spec["encoder"]), Normalize()]
            SentenceTransformer(modules=modules, device="cpu").save(str(out), safe_serialization=True)
    else:
        model.save_pretrained(out, safe_serialization=True)
        tok.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())
