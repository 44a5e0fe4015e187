"""The GPU check's steps (benchmarks/gpu_check.sh runs them; docs/slurm.md, "The GPU check", has the last run).

    python benchmarks/gpu_check.py prepare [--python-version 3.12] [--out .gpucheck]
        (the CPU machine, this project's venv) the wheels the GPU machine lacks, at envs/constraints.txt's
        versions, resolved for its Python by pip, in parts that each fit one call's carry (PART_BYTES)
    python benchmarks/gpu_check.py install PART [--site /tmp/site]
        (the GPU machine) install one part's wheels into SITE; a wheel larger than a part travels in
        chunks over several parts and is installed once its last chunk has arrived
    python benchmarks/gpu_check.py versions
        every dependency's installed version against pyproject.toml's range (exit 1 if one is outside)
    python benchmarks/gpu_check.py summarize SNAKEMAKE_LOG
        one line per rule from a Snakemake run's log: jobs done / failed / not run, wall time, the jobs that
        used CUDA (their log's ``mialab: CUDA device`` line) and their peak memory; the failed jobs' log tails
    python benchmarks/gpu_check.py cudnn
        whether this GPU's default attention backward returns NaN on a masked batch, with cuDNN attention on and off
    python benchmarks/gpu_check.py throughput [--arch llama2-7b]
        on a random-init 7-8B architecture in bf16: the scoring path (mialab.lm.logprobs.token_stats)
        against a bare forward, and transformers' generate (and vLLM's, when it is installed) in new tokens/s
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent / "gpu_check"
#: the most one part may hold: a call carries 64 MiB with the working tree (~6 MB) beside it
PART_BYTES = 54 * 2**20
#: pip's platform tags for the GPU machine (x86-64, glibc 2.35+)
PLATFORMS = ["manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64", "manylinux_2_28_x86_64",
             "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "linux_x86_64"]
#: Debian packages the jobs read that the GPU image lacks: WordNet for the offline paraphrasers (unpacked
#: beside the site, never into /)
DEBS = ("wordnet-base",)
#: what the check does not need on the GPU machine: the SLURM executor (runs are local) and the ILP solver
#: of Snakemake's default scheduler (the check runs --scheduler greedy)
NOT_NEEDED = ("snakemake-executor-plugin-slurm", "pulp")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image() -> tuple[set[str], set[str]]:
    """(the GPU image's package names, the ones to carry anyway) from gpu_check/image.txt."""
    have, override = set(), set()
    for line in (HERE / "image.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("override "):
            override.add(canonical(line.split()[1]))
        elif line:
            have.add(canonical(line.split("==")[0]))
    return have, override


def pip(*args: str, capture: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], check=True, text=True,
                          capture_output=capture)


def target_args(python_version: str) -> list[str]:
    return ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp",
            *[a for p in PLATFORMS for a in ("--platform", p)]]


def closure(python_version: str) -> dict[str, str]:
    """``name -> version`` of what the project needs on the GPU machine: pyproject.toml's dependencies and
    theirs, as installed here (envs/constraints.txt's versions), markers read for ``python_version``; the
    image's packages (gpu_check/image.txt) and what they need are there, unless overridden."""
    import tomllib
    from importlib.metadata import PackageNotFoundError, requires, version

    from packaging.requirements import Requirement

    have, override = image()
    env = {"python_version": python_version, "python_full_version": f"{python_version}.0", "extra": ""}
    todo = [Requirement(d) for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]]
    found: dict[str, str] = {}
    while todo:
        req = todo.pop()
        name = canonical(req.name)
        if name in found or name in NOT_NEEDED or (req.marker and not req.marker.evaluate(env)) \
                or (name in have and name not in override):
            continue
        try:
            found[name] = version(req.name)
        except PackageNotFoundError:   # e.g. needed on Python 3.12 only: resolve it from the constraints
            raise SystemExit(f"{req.name} ({req}) is needed on Python {python_version} but not installed here; "
                             "add it to envs/constraints.txt") from None
        todo += [Requirement(r) for r in requires(req.name) or []]
    return found


def prepare(python_version: str, out: Path) -> None:
    """Download (or, for an sdist-only package, build) the wheels of :func:`closure` into ``out/part-N/``."""
    shutil.rmtree(out, ignore_errors=True)
    wheels = out / "wheels"
    wheels.mkdir(parents=True)
    carry = closure(python_version)
    built = []
    for name, version in sorted(carry.items()):
        try:
            pip("download", "--quiet", "--no-deps", "-d", str(wheels), *target_args(python_version),
                f"{name}=={version}", capture=True)
        except subprocess.CalledProcessError:   # no wheel on PyPI (deepspeed, connection_pool): build one
            pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(wheels), f"{name}=={version}",
                capture=True)
            built.append(name)
    subprocess.run(["apt-get", "download", "-q", *DEBS], cwd=wheels, check=True, capture_output=True)
    for deb in wheels.glob("*.deb"):   # apt's names hold '%3a' (an epoch): a plain name travels anywhere
        deb.rename(wheels / f"{deb.name.split('_')[0]}.deb")
    impure = [w.name for w in wheels.glob("*.whl") if canonical(w.name.split("-")[0]) in built
              and not w.name.endswith("-py3-none-any.whl")]
    if impure:
        raise SystemExit(f"built here, but not pure Python (would not run on the GPU machine): {impure}")
    parts = pack(sorted([*wheels.glob("*.whl"), *wheels.glob("*.deb")], key=lambda p: -p.stat().st_size), out)
    (out / "carried.txt").write_text("".join(f"{n}=={v}{' (built here)' if n in built else ''}\n"
                                             for n, v in sorted(carry.items()))
                                     + "".join(f"{d} (Debian)\n" for d in DEBS))
    shutil.rmtree(wheels)
    for part in parts:
        size = sum(f.stat().st_size for f in part.iterdir())
        print(f"{part}: {len(list(part.iterdir()))} files, {size / 2**20:.1f} MiB")
    print(f"{len(carry)} packages for Python {python_version} ({out / 'carried.txt'}); "
          "on the GPU machine, one call per part: bash benchmarks/gpu_check.sh install N")


def pack(files: list[Path], out: Path) -> list[Path]:
    """First-fit decreasing into parts of at most :data:`PART_BYTES`; a larger file is cut into chunks
    (``<file>.chunk-<i>-of-<n>``) that fill parts of their own."""
    parts: list[tuple[Path, int]] = []

    def place(path: Path, size: int, name: str) -> None:
        for i, (part, used) in enumerate(parts):
            if used + size <= PART_BYTES:
                shutil.move(str(path), part / name)
                parts[i] = (part, used + size)
                return
        part = out / f"part-{len(parts) + 1}"
        part.mkdir()
        shutil.move(str(path), part / name)
        parts.append((part, size))

    for f in files:
        size = f.stat().st_size
        if size <= PART_BYTES:
            place(f, size, f.name)
            continue
        data, n = f.read_bytes(), -(-size // PART_BYTES)
        for i in range(n):
            chunk = f.with_name(f"{f.name}.chunk-{i + 1}-of-{n}")
            chunk.write_bytes(data[i * PART_BYTES:(i + 1) * PART_BYTES])
            place(chunk, chunk.stat().st_size, chunk.name)
        f.unlink()
    return [p for p, _ in parts]


def assemble(part: Path, chunks: Path) -> list[Path]:
    """``part``'s wheels, and each wheel whose chunks (kept in ``chunks`` from earlier parts) are now complete."""
    chunks.mkdir(parents=True, exist_ok=True)
    ready = sorted([*part.glob("*.whl"), *part.glob("*.deb")])
    for chunk in part.glob("*.chunk-*-of-*"):
        shutil.copy(chunk, chunks / chunk.name)
    for first in sorted(chunks.glob("*.chunk-1-of-*")):
        name, n = first.name.split(".chunk-")[0], int(first.name.rsplit("-of-", 1)[1])
        pieces = [chunks / f"{name}.chunk-{i}-of-{n}" for i in range(1, n + 1)]
        if all(p.exists() for p in pieces):
            with (chunks / name).open("wb") as fh:
                for p in pieces:
                    fh.write(p.read_bytes())
                    p.unlink()
            ready.append(chunks / name)
    return ready


def install(part: Path, site: Path) -> None:
    """Install :func:`assemble`'s wheels of ``part`` into ``site`` (no index, no dependencies: the parts hold
    them) and unpack its Debian packages into ``<site>-root`` (``dpkg -x``: files only, no scripts)."""
    ready = assemble(part, site.parent / f"{site.name}-chunks")
    wheels = [w for w in ready if w.name.endswith(".whl")]
    if wheels:
        pip("install", "--quiet", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade",
            "--target", str(site), *map(str, wheels))
    for deb in part.glob("*.deb"):
        subprocess.run(["dpkg", "-x", str(deb), str(site.parent / f"{site.name}-root")], check=True)
    print(f"installed {len(wheels)} wheel(s) and {len(list(part.glob('*.deb')))} Debian package(s) of {part} "
          f"into {site}")


def versions() -> int:
    """Print every dependency's installed version with pyproject.toml's range; 1 when one is outside it."""
    import tomllib
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement
    from packaging.version import Version

    bad = 0
    for dep in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]:
        req = Requirement(dep)
        try:
            got = version(req.name)
        except PackageNotFoundError:
            got = None
        ok = got is not None and Version(got).public in req.specifier
        needed = canonical(req.name) not in NOT_NEEDED
        bad += needed and not ok
        print(f"VERSION {req.name:32} {got or 'missing':14} {str(req.specifier) or 'any':22} "
              f"{'ok' if ok else ('OUTSIDE' if needed else 'not needed')}")
    return int(bad > 0)


STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
START = re.compile(r"^(?:local)?rule (\w+):$")
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)")
ERROR = re.compile(r"^Error in rule (\w+):$")
KILLED = "died with <Signals.SIGTERM"
CUDA = re.compile(r"^mialab: CUDA device \d+ \((.*)\): peak memory ([\d.]+) GiB")


def parse_log(text: str) -> tuple[dict, dict]:
    """A Snakemake log's planned jobs per rule (its first "Job stats" table) and its jobs:
    ``jobid -> {rule, start, end, log, failed, killed}`` (times in seconds; ``killed``: ended by a SIGTERM, as
    when the check's time limit stops the run)."""
    planned: dict[str, int] = {}
    jobs: dict[str, dict] = {}
    now, block, in_error, killed, in_stats = None, None, False, False, False
    for line in text.splitlines():
        if line.startswith("Job stats:") and not planned:
            in_stats = True
        elif in_stats:
            if m := re.match(r"^(\w+) +(\d+)$", line):
                if m.group(1) != "total":
                    planned[m.group(1)] = int(m.group(2))
            elif planned and not line.strip():
                in_stats = False
        if m := STAMP.match(line):
            now = time.mktime(time.strptime(m.group(1), "%a %b %d %H:%M:%S %Y"))
        elif m := START.match(line):
            block, in_error = {"rule": m.group(1), "start": now}, False
        elif KILLED in line:
            killed = True
        elif m := ERROR.match(line):
            block, in_error = {"rule": m.group(1)}, True
        elif block is not None and (m := re.match(r"^\s+jobid: (\d+)$", line)):
            job = jobs.setdefault(m.group(1), {"rule": block["rule"], "start": block.get("start")})
            if in_error:
                job["killed" if killed else "failed"], job["end"], killed = True, now, False
            if "log" in block:   # a job's block names its log before its id, an error's after it
                job["log"] = block["log"]
            block["id"] = m.group(1)
        elif block is not None and (m := re.match(r"^\s+log: (\S+)", line)):
            block["log"] = m.group(1)
            if "id" in block:
                jobs[block["id"]]["log"] = m.group(1)
        elif m := FINISHED.match(line):
            jobs.setdefault(m.group(1), {"rule": m.group(2), "start": None})["end"] = now
    return planned, jobs


def summarize(log_path: Path, workdir: Path, tail: int = 25) -> int:
    """Print the per-rule table of a run and the failed jobs' log tails; returns the number of failed jobs
    (killed ones, and ones never started, are counted apart)."""
    planned, jobs = parse_log(log_path.read_text())
    rules: dict[str, dict] = defaultdict(lambda: {"done": 0, "failed": 0, "killed": 0, "started": 0, "wall": [],
                                                  "cuda": 0, "peak": 0.0, "device": ""})
    for job in jobs.values():
        r = rules[job["rule"]]
        r["started"] += 1
        state = "killed" if job.get("killed") else "failed" if job.get("failed") else \
            "done" if job.get("end") is not None else None
        if state:
            r[state] += 1
        if state == "done" and job.get("start") is not None:
            r["wall"].append(job["end"] - job["start"])
        log = workdir / job.get("log", "-")
        if state == "done" and log.is_file():
            for m in map(CUDA.match, log.read_text(errors="replace").splitlines()):
                if m:
                    r["cuda"] += 1
                    r["device"], r["peak"] = m.group(1), max(r["peak"], float(m.group(2)))
    starts = [j["start"] for j in jobs.values() if j.get("start") is not None]
    ends = [j["end"] for j in jobs.values() if j.get("end") is not None]
    print(f"{'rule':24} {'jobs':>4} {'done':>4} {'failed':>6} {'killed':>6} {'not run':>7} {'wall s (sum / max)':>18} "
          f"{'on CUDA':>7} {'peak GiB':>8}")
    for name in sorted(set(planned) | set(rules)):
        r = rules[name]
        n = planned.get(name, r["started"])
        wall = f"{sum(r['wall']):.0f} / {max(r['wall']):.0f}" if r["wall"] else "-"
        print(f"{name:24} {n:4} {r['done']:4} {r['failed']:6} {r['killed']:6} {n - r['started']:7} {wall:>18} "
              f"{r['cuda']:7} {r['peak']:8.2f}")
    failed = [j for j in jobs.values() if j.get("failed")]
    devices = sorted({r["device"] for r in rules.values() if r["device"]})
    print(f"jobs: {sum(planned.values()) or len(jobs)}, done: {sum(r['done'] for r in rules.values())}, "
          f"failed: {len(failed)}, killed: {sum(r['killed'] for r in rules.values())}, "
          f"wall: {max(ends) - min(starts) if starts and ends else 0:.0f} s, on CUDA: {', '.join(devices) or 'none'}")
    for job in failed:
        log = workdir / job.get("log", "-")
        print(f"--- failed {job['rule']}: {job.get('log')}")
        if log.is_file():
            lines = log.read_text(errors="replace").splitlines()
            causes = [line for line in lines[:-tail] if re.search(r"Error|Assertion|nan", line)][:12]
            print("\n".join([*causes, *(["..."] if causes else []), *lines[-tail:]]))
    return len(failed)


def cudnn_attention(length: int = 704, dim: int = 64) -> None:
    """NaN gradients of torch's attention on this GPU with a mask and very negative logits (every row's
    logsumexp below ln of float32's largest, at a length of 64 modulo 128: pytorch/pytorch#196678), with the
    default backends and with cuDNN's attention off (:func:`mialab.lm.loading.no_cudnn_attention`)."""
    import math

    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    base = [torch.randn(1, 1, length, dim, device="cuda", dtype=torch.bfloat16) * s for s in (0.1, 0.1, 1.0)]
    base[0][..., 0], base[1][..., 0] = 1.0, -120 * math.sqrt(dim)
    mask = torch.ones(length, length, dtype=torch.bool, device="cuda").tril()[None, None]
    grad = torch.randn(1, 1, length, dim, device="cuda", dtype=torch.bfloat16)
    for label, cudnn in (("default backends", True), ("cuDNN attention off", False)):
        torch.backends.cuda.enable_cudnn_sdp(cudnn)
        q, k, v = (t.clone().requires_grad_() for t in base)
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask).backward(grad)
        bad = sum(int((~torch.isfinite(t.grad)).sum()) for t in (q, k, v))
        print(f"CUDNN_SDPA {label}: {bad} non-finite gradient values (torch {torch.__version__}, "
              f"cuDNN {torch.backends.cudnn.version()})")


#: 7-8B architectures of the paper configs' targets, random-init (nothing is downloaded)
ARCHITECTURES = {
    "llama2-7b": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
                  "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096},   # Tulu-2-7B
    "llama3-8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                  "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
                  "rope_theta": 500000.0},                                                        # Tulu-3-8B
}


def throughput(arch: str, n_texts: int = 256, lengths: tuple[int, ...] = (512, 64), new_tokens: int = 128,
               gen_batch: int = 64) -> None:
    """Tokens per second of the scoring path (one forward pass per text: a text's scores never depend on its
    neighbours) against a bare batched forward (16 texts a pass), for long and short texts, and new tokens per
    second of transformers' generate."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from mialab.lm.logprobs import token_stats
    from mialab.lm.tiny import train_tokenizer

    corpus = (REPO / "resources" / "data" / "tinyshakespeare" / "input.txt").read_text().split("\n\n")
    tok = train_tokenizer(corpus, vocab_size=8192)
    words = " ".join(corpus).split()
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(LlamaConfig(**ARCHITECTURES[arch], bos_token_id=tok.bos_token_id,
                                             eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
                                 ).to(torch.bfloat16).eval()
    params = sum(p.numel() for p in model.parameters()) / 1e9

    def timed(fn) -> float:
        fn()  # warm: kernels chosen, memory pooled
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return time.perf_counter() - start

    for length in lengths:
        texts = [" ".join(words[i * length:(i + 1) * length]) for i in range(n_texts)]   # >= length tokens
        enc = tok(texts, truncation=True, max_length=length, padding="max_length", return_tensors="pt").to("cuda")
        n_tokens = int(enc["attention_mask"].sum())

        def bare() -> None:
            with torch.no_grad():
                for s in range(0, n_texts, 16):
                    model(input_ids=enc["input_ids"][s:s + 16], attention_mask=enc["attention_mask"][s:s + 16])

        forward = timed(bare)
        scoring = timed(lambda: token_stats(model, tok, texts, max_length=length))
        print(f"THROUGHPUT {arch} ({params:.2f}B, bf16), {n_texts} texts of {length} tokens: bare forward "
              f"(16 a pass) {n_tokens / forward:,.0f} tokens/s, scoring path (one text a pass) "
              f"{n_tokens / scoring:,.0f} tokens/s ({scoring / forward:.2f}x the forward's time)")
    tok.padding_side = "left"
    prompts = tok(texts[:gen_batch], truncation=True, max_length=min(lengths), padding="max_length",
                  return_tensors="pt").to("cuda")

    def gen() -> None:
        with torch.no_grad():
            model.generate(**prompts, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True,
                           top_p=0.95, top_k=50, pad_token_id=tok.pad_token_id)

    print(f"THROUGHPUT {arch}: transformers generate, batch {gen_batch}: "
          f"{gen_batch * new_tokens / timed(gen):,.0f} new tokens/s")
    try:
        import vllm  # noqa: F401
    except ImportError:
        print("THROUGHPUT vllm: not installed here (not carried: docs/slurm.md, 'The GPU check')")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--python-version", default="3.12")
    p.add_argument("--out", type=Path, default=REPO / ".gpucheck")
    p = sub.add_parser("install")
    p.add_argument("part", type=Path)
    p.add_argument("--site", type=Path, default=Path("/tmp/site"))
    sub.add_parser("versions")
    p = sub.add_parser("summarize")
    p.add_argument("log", type=Path)
    p.add_argument("--workdir", type=Path, default=Path.cwd())
    sub.add_parser("cudnn")
    p = sub.add_parser("throughput")
    p.add_argument("--arch", choices=sorted(ARCHITECTURES), default="llama2-7b")
    args = ap.parse_args()
    if args.step == "prepare":
        prepare(args.python_version, args.out)
    elif args.step == "install":
        install(args.part, args.site)
    elif args.step == "versions":
        sys.exit(versions())
    elif args.step == "summarize":
        sys.exit(min(summarize(args.log, args.workdir), 1))
    elif args.step == "cudnn":
        cudnn_attention()
    else:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        throughput(args.arch)


if __name__ == "__main__":
    main()
