"""Rollout engine: N sampled continuations per candidate prefix, one interface, several backends.

A backend (registered by name: ``hf`` = transformers ``generate``, ``vllm`` = vLLM in its own
venv) turns tokenised prompts into sampled completions. The engine builds the prompts
(:mod:`mialab.lm.prompts`), calls the backend and returns the rollouts as a DataFrame in
the rollout schema ``id, sample, text, n_tokens, finish_reason``: ``sample`` numbers the N
rollouts of an id from 0, ``text`` is the decoded completion (special tokens skipped, the given
assistant prefix not included), ``n_tokens`` counts generated tokens without the final EOS and
``finish_reason`` is ``stop`` (EOS generated) or ``length`` (``max_new_tokens`` reached).

Sampling defaults are those of ADRA's rollouts (Table 14): temperature 1.0, top-p 0.95, top-k 50.

Seeds. A call's ``SamplingConfig.seed`` is spread over its prompts by position, never shared by two of them:
the ``hf`` backend seeds each batch with :func:`derived_seed` of (seed, batch index) and its rows draw apart,
the ``vllm`` backend gives prompt ``i`` of the job its own per-request seed :func:`derived_seed` of (seed, i)
(vLLM samples a request from its seed alone, so one seed for every request would give a prompt sent twice
the same answer twice). A prompt repeated in a call therefore gets distinct samples on either backend, and
:func:`text_generator`'s ``attempt`` re-seeds a call that asks again for answers still invalid.

:func:`text_completions` puts prompt strings through a started backend and decodes the answers; the
methods' text generators (:func:`rollout_generator`, :func:`text_generator`) are its two call styles.

Resumable generation (:class:`Parts`): given a parts folder (``<output>.parts/`` beside a job's output,
:func:`parts_folder`), the engine generates ``backend.part_size`` candidates at a time and writes each
part's results there as parquet, recording what the part covers and a fingerprint of the job's settings
and prompts; a rerun after a kill reuses the valid parts, regenerates a truncated or mismatched one, and
gives the same output as an uninterrupted run, because a part starts on a seed boundary of the backend
(``offset`` of :meth:`RolloutBackend.generate`). The job removes the folder once its output is in place.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol

import numpy as np
import pandas as pd

from mialab.core.progress import console
from mialab.core.registry import Registry
from mialab.lm.prompts import format_prompt, prompt_text, prompt_token_ids

ROLLOUT_COLUMNS = ("id", "sample", "text", "n_tokens", "finish_reason")
FINISH_REASONS = ("stop", "length")
BACKEND_MODULES = ("mialab.lm.hf_backend", "mialab.lm.vllm_backend")


@dataclass(frozen=True, kw_only=True)
class SamplingConfig:
    """How rollouts are sampled: ``n`` completions per prompt (one unless said), ``temperature == 0`` greedy
    decoding. No sampling value has a default here: each caller passes its own (N-Sampling's and ADRA's come
    from their config sections, whose schema alone holds the defaults)."""

    n: int = 1
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n < 1 or self.max_new_tokens < 1:
            raise ValueError(f"need n >= 1 and max_new_tokens >= 1, got {self.n}, {self.max_new_tokens}")
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError(f"invalid sampling parameters {self}")


class Completion(NamedTuple):
    """One sampled continuation: generated token ids (final EOS removed) and why it ended."""

    token_ids: list[int]
    finish_reason: str


class RolloutBackend(Protocol):
    #: candidates per resumable part, a multiple of the backend's seed boundaries
    part_size: int

    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig, stop_ids: frozenset[int], *,
                 offset: int = 0) -> list[list[Completion]]:
        """``sampling.n`` completions for each tokenised prompt, in prompt order; ``prompts`` are those of
        a whole job from index ``offset`` on (a multiple of ``part_size``), sampled as they would be there."""


BackendFactory = Callable[..., RolloutBackend]


def derived_seed(seed: int, index: int) -> int:
    """An independent seed for item ``index`` (a batch, a prompt, an attempt) of a call seeded ``seed``
    (numpy's ``SeedSequence`` of the pair, 32 bits)."""
    return int(np.random.SeedSequence([int(seed), int(index)]).generate_state(1)[0])


def attempt_seed(seed: int, attempt: int) -> int:
    """The seed of attempt ``attempt`` of a call seeded ``seed``: ``seed`` itself first, then
    :func:`derived_seed` of (seed, attempt), so that asking again samples anew."""
    return int(seed) if attempt == 0 else derived_seed(seed, attempt)


def _import_backends() -> None:
    for module in BACKEND_MODULES:
        importlib.import_module(module)


BACKENDS: Registry[BackendFactory] = Registry("rollout backend", load=_import_backends, plural="backends")
#: Decorator: make a backend factory ``(model_path, **options) -> RolloutBackend`` available by name.
register_backend = BACKENDS.register
#: Names of every rollout backend, sorted.
known_backends = BACKENDS.known
#: The backend factory called ``name``; an unknown name fails with the list of known ones.
get_backend = BACKENDS.get


def check_backend_options(name: str, options: dict, key: str = "backend_options") -> None:
    """Refuse options of backend ``name`` that could load code: ``trust_remote_code`` (only the model's
    ``models.<name>.trust_remote_code`` allows that) and what the backend's own ``check_options`` refuses
    (vLLM: its venv, engine arguments outside the allow-list). Run before any job (the plans) and when a
    backend starts (:func:`start_backend`); the ``ValueError`` names the option under config key ``key``."""
    if "trust_remote_code" in options:
        raise ValueError(f"{key}.trust_remote_code: a backend option cannot let a model run its folder's code; "
                         "set models.<name>.trust_remote_code: true for that model")
    check = getattr(get_backend(name), "check_options", None)
    if check is not None:
        try:
            check(options)
        except ValueError as e:
            raise ValueError(f"{key}.{e}") from None


def start_backend(name: str, model: str, options: dict | None = None, *,
                  trust_remote_code: bool = False) -> RolloutBackend:
    """Backend ``name`` started on ``model`` with the config's ``backend_options``
    (:func:`check_backend_options` first).

    Whether the model folder's code may run comes from ``trust_remote_code`` alone (the model's
    ``models.<name>.trust_remote_code``): an option cannot turn it on.
    """
    options = dict(options or {})
    check_backend_options(name, options)
    return get_backend(name)(model, trust_remote_code=trust_remote_code, **options)


def stop_token_ids(model_path: str, tokenizer) -> frozenset[int]:
    """EOS ids that end a rollout: the model's generation config ones, else the tokenizer's."""
    from transformers import GenerationConfig

    from mialab.lm.loading import pinned

    ids: set[int] = set()
    model_path = pinned(model_path)   # a hub id the run pins: its snapshot, which holds the generation config
    if (Path(model_path) / "generation_config.json").exists():
        eos = GenerationConfig.from_pretrained(model_path).eos_token_id
        ids.update([eos] if isinstance(eos, int) else (eos or []))
    if not ids and tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    if not ids:
        raise ValueError(f"no EOS token id found for {model_path}")
    return frozenset(ids)


def cut_at_stop(token_ids: Sequence[int], stop_ids: frozenset[int]) -> Completion:
    """Cut generated ids at the first stop id (dropped): ``stop``; no stop id: ``length``."""
    for i, t in enumerate(token_ids):
        if t in stop_ids:
            return Completion(list(token_ids[:i]), "stop")
    return Completion(list(token_ids), "length")


def parts_folder(output: str | Path) -> Path:
    """The work folder of a generation job's partial results: ``<output>.parts`` beside ``output``."""
    return Path(f"{output}.parts")


def fingerprint(settings) -> str:
    """sha256 of the JSON of ``settings`` (keys sorted): what a part must have been generated under."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()


def model_identity(path: str | Path) -> list | str:
    """A cheap fingerprint of a model folder (each file's name, size and modification time), or the
    hub id itself: parts of an earlier attempt on other weights at the same path are not reused."""
    path = Path(path)
    if not path.is_dir():
        return str(path)
    return [(str(f.relative_to(path)), f.stat().st_size, f.stat().st_mtime_ns)
            for f in sorted(path.rglob("*")) if f.is_file()]


class Parts:
    """A folder of resumable generation parts: ``<key[:16]>-<start>.parquet`` holds the results of items
    ``[start, stop)`` of the call fingerprinted ``key``, with ``{key, start, stop}`` in its parquet metadata."""

    META = b"mialab_part"

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def load(self, key: str, start: int, stop: int) -> pd.DataFrame | None:
        """The part's frame; None (and the file removed) when missing, unreadable or of other settings."""
        import pyarrow.parquet as pq

        path = self.folder / f"{key[:16]}-{start:09d}.parquet"
        if not path.exists():
            return None
        try:
            table = pq.read_table(path)
            meta = json.loads((table.schema.metadata or {}).get(self.META, b"{}"))
        except (OSError, ValueError):
            meta = None
        if meta != {"key": key, "start": start, "stop": stop}:
            path.unlink()
            return None
        return table.to_pandas()

    def save(self, key: str, start: int, stop: int, frame: pd.DataFrame) -> None:
        """Write a part atomically (a kill mid-write leaves no part)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from mialab.core.io import atomic_path

        table = pa.Table.from_pandas(frame, preserve_index=False)
        meta = json.dumps({"key": key, "start": start, "stop": stop}).encode()
        with atomic_path(self.folder / f"{key[:16]}-{start:09d}.parquet") as tmp:
            pq.write_table(table.replace_schema_metadata({**(table.schema.metadata or {}), self.META: meta}), tmp)

    def run(self, key: str, total: int, size: int, chunk: Callable[[int, int], pd.DataFrame]) -> pd.DataFrame:
        """``chunk(start, stop)`` of items ``[0, total)``, ``size`` at a time, each part loaded if valid (and
        logged, so a resumed job's log says what it reused) else generated and saved; the parts concatenated
        in order."""
        frames = []
        for start in range(0, total, size):
            stop = min(start + size, total)
            frame = self.load(key, start, stop)
            if frame is None:
                frame = chunk(start, stop)
                self.save(key, start, stop, frame)
            else:
                console.log(f"reusing part {start}-{stop} of {total} from {self.folder}")
            frames.append(frame)
        return pd.concat(frames, ignore_index=True) if frames else chunk(0, 0)

    def remove(self) -> None:
        """Delete the folder (its output is in place)."""
        shutil.rmtree(self.folder, ignore_errors=True)


def rollouts_frame(ids: Sequence, completions: Sequence[Sequence[Completion]], tokenizer) -> pd.DataFrame:
    """The rollout-schema DataFrame of the completions of ``ids`` (decoded with ``tokenizer``)."""
    rows = []
    for cid, samples in zip(ids, completions, strict=True):
        for k, c in enumerate(samples):
            rows.append((cid, k, tokenizer.decode(c.token_ids, skip_special_tokens=True), len(c.token_ids),
                         c.finish_reason))
    frame = pd.DataFrame(rows, columns=list(ROLLOUT_COLUMNS))
    return validate_rollouts(frame.astype({"sample": np.int64, "n_tokens": np.int64}))


def validate_rollouts(frame: pd.DataFrame) -> pd.DataFrame:
    """Check the rollout schema (columns, integer dtypes, finish reasons, no missing values); returns ``frame``."""
    if tuple(frame.columns) != ROLLOUT_COLUMNS:
        raise ValueError(f"rollout columns must be {ROLLOUT_COLUMNS}, got {tuple(frame.columns)}")
    if frame.isna().any().any():
        raise ValueError("rollouts contain missing values")
    for col in ("sample", "n_tokens"):
        if not pd.api.types.is_integer_dtype(frame[col]):
            raise ValueError(f"rollout column {col!r} must be integer, got {frame[col].dtype}")
    if not frame["finish_reason"].isin(FINISH_REASONS).all():
        raise ValueError(f"finish_reason must be one of {FINISH_REASONS}")
    if frame.duplicated(["id", "sample"]).any():
        raise ValueError("duplicate (id, sample) rollouts")
    return frame


def write_rollouts(frame: pd.DataFrame, path: str | Path) -> None:
    """Validate and write rollouts to parquet atomically."""
    from mialab.core.io import write_parquet

    write_parquet(validate_rollouts(frame), path)


def generate_rollouts(split: pd.DataFrame, backend: RolloutBackend, tokenizer, *, template: str,
                      sampling: SamplingConfig, prompt_format: str, stop_ids: frozenset[int],
                      assistant_prefix_ratio: float = 0.0, assistant_prefix_min_words: int = 1,
                      parts: Parts | None = None, settings: dict | None = None) -> pd.DataFrame:
    """Rollouts (rollout schema) of every row of ``split`` (columns id, prefix, suffix); with ``parts``,
    resumable there (``settings``: the job's, beyond prompts and sampling, that a part must match)."""
    texts = [prompt_text(tokenizer, template, p, s, prompt_format=prompt_format,
                         assistant_prefix_ratio=assistant_prefix_ratio,
                         assistant_prefix_min_words=assistant_prefix_min_words)
             for p, s in zip(split["prefix"], split["suffix"])]
    prompts = [prompt_token_ids(tokenizer, t, prompt_format) for t in texts]
    ids = list(split["id"])

    def chunk(start: int, stop: int) -> pd.DataFrame:
        completions = backend.generate(prompts[start:stop], sampling, stop_ids, offset=start)
        return rollouts_frame(ids[start:stop], completions, tokenizer)

    if parts is None:
        return chunk(0, len(prompts))
    key = fingerprint({"rollouts": settings, "sampling": dataclasses.asdict(sampling), "ids": ids,
                       "prompts": prompts, "stop_ids": sorted(stop_ids)})
    return validate_rollouts(parts.run(key, len(prompts), backend.part_size, chunk))


def run_rollouts(split: pd.DataFrame, *, model: str, backend: str = "hf", template: str = "{prefix}",
                 sampling: SamplingConfig, prompt_format: str = "plain",
                 assistant_prefix_ratio: float = 0.0,
                 backend_options: dict | None = None, trust_remote_code: bool = False) -> pd.DataFrame:
    """Load ``model``'s tokenizer, start backend ``backend`` on it and generate rollouts for ``split``."""
    (rollouts,) = run_rollouts_many([split], [sampling], model=model, backend=backend, template=template,
                                    prompt_format=prompt_format,
                                    assistant_prefix_ratio=assistant_prefix_ratio, backend_options=backend_options,
                                    trust_remote_code=trust_remote_code)
    return rollouts


def run_rollouts_many(splits: Sequence[pd.DataFrame], samplings: Sequence[SamplingConfig], *, model: str,
                      backend: str = "hf", template: str = "{prefix}", prompt_format: str = "plain",
                      assistant_prefix_ratio: float = 0.0, assistant_prefix_min_words: int = 1,
                      backend_options: dict | None = None, trust_remote_code: bool = False,
                      parts: Sequence[str | Path] | None = None,
                      model_key=None) -> list[pd.DataFrame]:
    """:func:`run_rollouts` of several splits, split ``i`` sampled with ``samplings[i]``, on one started backend
    (``trust_remote_code``: the model's ``models.<name>.trust_remote_code``); with ``parts`` (one folder per
    split), resumable (:class:`Parts`; ``model_key``: what identifies the model, by default
    :func:`model_identity` of ``model``)."""
    from mialab.lm.loading import load_tokenizer

    if len(splits) != len(samplings) or (parts is not None and len(parts) != len(splits)):
        raise ValueError(f"{len(splits)} split(s) but {len(samplings)} sampling setting(s)"
                         + (f" and {len(parts)} parts folder(s)" if parts is not None else ""))
    engine = start_backend(backend, model, backend_options, trust_remote_code=trust_remote_code)  # options first
    tokenizer = load_tokenizer(model, padding_side="left", trust_remote_code=trust_remote_code)
    stops = stop_token_ids(model, tokenizer)
    settings = {"model": model_identity(model) if model_key is None else model_key, "backend": backend,
                "backend_options": backend_options}
    folders = [None] * len(splits) if parts is None else [Parts(p) for p in parts]
    return [generate_rollouts(split, engine, tokenizer, template=template, sampling=sampling,
                              prompt_format=prompt_format,
                              stop_ids=stops, assistant_prefix_ratio=assistant_prefix_ratio,
                              assistant_prefix_min_words=assistant_prefix_min_words, parts=folder, settings=settings)
            for split, sampling, folder in zip(splits, samplings, folders)]


def text_completions(model_path: str, *, backend: str = "hf", backend_options: dict | None = None, chat: bool = False,
                     trust_remote_code: bool = False,
                     parts: str | Path | None = None) -> Callable[[Sequence[str], SamplingConfig], list[str]]:
    """``complete(prompts, sampling) -> completions``: backend ``backend`` (started once on ``model_path``
    with ``backend_options``) answers each prompt string, sent as one chat user turn when ``chat``
    (:func:`mialab.lm.prompts.format_prompt`) and tokenised as the engine does (BOS added unless already
    there); each prompt's ``sampling.n`` completions are returned decoded (prompt-major), special tokens and
    the stop token dropped.
    With a ``parts`` folder every call is resumable there (:class:`Parts`)."""
    from mialab.lm.loading import load_tokenizer

    engine = start_backend(backend, model_path, backend_options, trust_remote_code=trust_remote_code)  # options first
    tok = load_tokenizer(model_path, padding_side="left", trust_remote_code=trust_remote_code)
    stops = stop_token_ids(model_path, tok)
    folder = None if parts is None else Parts(parts)
    settings = {"model": model_identity(model_path), "backend": backend, "backend_options": backend_options}

    def complete(prompts: Sequence[str], sampling: SamplingConfig) -> list[str]:
        texts = [format_prompt(tok, p) for p in prompts] if chat else list(prompts)
        ids = [prompt_token_ids(tok, t, "chat" if chat else "plain") for t in texts]

        def chunk(start: int, stop: int) -> pd.DataFrame:
            completions = engine.generate(ids[start:stop], sampling, stops, offset=start)
            return pd.DataFrame({"text": [tok.decode(c.token_ids, skip_special_tokens=True)
                                          for samples in completions for c in samples]}, dtype=str)

        if folder is None:
            return chunk(0, len(ids))["text"].tolist()
        key = fingerprint({"completions": settings, "sampling": dataclasses.asdict(sampling), "prompts": ids,
                           "stop_ids": sorted(stops)})
        return folder.run(key, len(ids), engine.part_size, chunk)["text"].tolist()

    return complete


def rollout_generator(model_path: str, *, backend: str = "hf", backend_options: dict | None = None,
                      trust_remote_code: bool = False, parts: str | Path | None = None,
                      top_p: float = 0.95, top_k: int = 50) -> Callable[..., list[str]]:
    """``generate(prompts, *, max_new_tokens, temperature, seed, n) -> continuations`` of raw prompt strings
    (CalibDCD's target outputs; ``n`` continuations per prompt, prompt-major, ``temperature`` 0: greedy, else
    sampled with ``top_p`` and ``top_k``), on :func:`text_completions` (resumable in ``parts``)."""
    complete = text_completions(model_path, backend=backend, backend_options=backend_options,
                                trust_remote_code=trust_remote_code, parts=parts)

    def generate(prompts: Sequence[str], *, max_new_tokens: int, temperature: float = 0.0,
                 seed: int = 0, n: int = 1) -> list[str]:
        return complete(prompts, SamplingConfig(n=n, max_new_tokens=max_new_tokens, temperature=temperature,
                                                top_p=top_p, top_k=top_k, seed=seed))

    return generate


def text_generator(model_path: str, *, engine: str = "hf", backend_options: dict | None = None,
                   max_new_tokens: int = 4000, temperature: float = 0.7, top_p: float = 1.0,
                   seed: int = 0) -> Callable[..., list[str]]:
    """A ``generate(prompts) -> completions`` callable over an instruction model (a local folder or a
    hub id in the cache), for the LLM-backed helpers (paraphrasers, LaRA's perturbations, ADRA's judge):
    each prompt is sent as one chat user turn (:func:`text_completions` on backend ``engine``), no top-k
    cut. ``temperature=0`` decodes greedily (then re-prompting repeats the same answer);
    ``run(prompts, temperature=t, max_new_tokens=m)`` overrides them for one call, and ``attempt=a`` samples
    under :func:`attempt_seed` (a prompt asked again gets a fresh answer). Such a model is named by path,
    not as a configured model, so its folder's code never runs (a folder that declares some is refused)."""
    complete = text_completions(model_path, backend=engine, backend_options=backend_options, chat=True)
    sampling = SamplingConfig(n=1, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=0,
                              seed=seed)

    def run(prompts: list[str], *, temperature: float = temperature, max_new_tokens: int = max_new_tokens,
            attempt: int = 0) -> list[str]:
        return complete(prompts, dataclasses.replace(sampling, temperature=temperature, max_new_tokens=max_new_tokens,
                                                     seed=attempt_seed(seed, attempt)))

    return run
