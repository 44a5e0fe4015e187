"""A local stand-in for the Hugging Face Hub and for GitHub's raw files, for tests: repositories are folders
(``<root>/models/<org>/<name>/...``, ``<root>/datasets/<org>/<name>/...``) served on 127.0.0.1 with the
endpoints huggingface_hub and datasets call (repo info, tree listing, paths-info, resolve), and raw files under
``<root>/raw/<owner>/<name>/<commit>/<path>``; point ``HF_ENDPOINT`` at :func:`serve`'s address and
``MIALAB_GITHUB_RAW`` at it plus ``/raw``. A repository has one revision: the commit a request names (as the
hub answers for a commit hash), else :data:`SHA`.

:func:`stand_in_sources` fills such a root with the CPU rehearsal's samples (``resources/rehearsal``: the real
columns, a few dozen rows) for every hub dataset, hub model and file the given configs name."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SHA = "0123456789abcdef0123456789abcdef01234567"
REPO = Path(__file__).resolve().parents[1]
COMMIT = re.compile(r"^[0-9a-f]{40}$")


def commit_of(revision: str | None) -> str:
    """The commit the fake hub serves for ``revision``: itself when it is a commit hash, else :data:`SHA`."""
    return revision if revision and COMMIT.match(revision) else SHA


def stand_in_sources(root: Path, configs: list[dict]) -> dict[str, str]:
    """Write into ``root`` (:func:`serve`'s folder) a repository for every hub model and hub dataset the validated
    ``configs`` name (a model: its ``config.json``; a dataset: its rehearsal sample as the parquet file of each
    split named) and the raw file of every file source (its sample in the file's format). Returns each file
    source's ``sha256`` -> its stand-in's (a test writes those into the configs it fetches with)."""
    import pandas as pd

    from mialab.data.sources import GITHUB_RAW, file_url, read_local
    from mialab.pipeline.lock import file_sources
    from mialab.pipeline.prefetch import hub_items
    from mialab.pipeline.rehearsal import table

    samples, hashes = table("datasets"), {}
    for config in configs:
        for item in hub_items(config):
            repo = root / f"{item.repo_type}s" / item.repo_id
            repo.mkdir(parents=True, exist_ok=True)
            if item.repo_type == "model":
                (repo / "config.json").write_text('{"model_type": "llama"}')
                continue
            (repo / "data").mkdir(exist_ok=True)
            frame = read_local(REPO / samples["hub"][item.repo_id])
            frame.to_parquet(repo / "data" / f"{item.split or 'train'}-00000-of-00001.parquet", index=False)
        for _, source in file_sources(config):
            url = file_url(source, base=GITHUB_RAW)
            path = root / "raw" / url.removeprefix(GITHUB_RAW + "/")
            path.parent.mkdir(parents=True, exist_ok=True)
            frame = read_local(REPO / samples["file"][url])
            {".parquet": lambda f, p: f.to_parquet(p, index=False),
             ".jsonl": lambda f, p: f.to_json(p, orient="records", lines=True)}[path.suffix](frame, path)
            hashes[source["sha256"]] = hashlib.sha256(path.read_bytes()).hexdigest()
    return hashes

def serve(root: Path) -> tuple[ThreadingHTTPServer, list]:
    """Serve ``root`` until ``server.shutdown()``; returns the server and the list of requests it got."""
    requests = []
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def _repo(self, kind, rest):
            parts = rest.split("/")
            return root / kind / parts[0] / parts[1], parts[2:]
        def _send(self, code, body=b"", headers=()):
            self.send_response(code)
            for k, v in headers: self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD": self.wfile.write(body)
        def do_HEAD(self): self.do_GET()
        def do_POST(self):
            url = urllib.parse.urlparse(self.path); p = url.path.strip("/")
            length = int(self.headers.get("Content-Length") or 0)
            form = urllib.parse.parse_qs(self.rfile.read(length).decode())
            requests.append(("POST", p, form))
            parts = p.split("/")
            repo = root / parts[1] / parts[2] / parts[3]
            out = []
            for path in form.get("paths", []):
                f = repo / path
                if f.is_file():
                    out.append({"type": "file", "oid": hashlib.sha1(f.read_bytes()).hexdigest(), "size": f.stat().st_size, "path": path})
                elif f.is_dir():
                    out.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": path})
            return self._send(200, json.dumps(out).encode(), [("Content-Type", "application/json")])
        def do_GET(self):
            url = urllib.parse.urlparse(self.path); p = url.path.strip("/")
            requests.append((self.command, p))
            if p.startswith("api/"):
                parts = p.split("/")
                if len(parts) < 4 or parts[1] not in ("models", "datasets"):
                    return self._send(404, b"{}")
                kind, rest = parts[1], "/".join(parts[2:])
                repo, tail = self._repo(kind, rest)
                if not repo.is_dir(): return self._send(404, b'{"error":"Repository not found"}', [("X-Error-Code", "RepoNotFound")])
                files = sorted(str(f.relative_to(repo)) for f in repo.rglob("*") if f.is_file())
                if not tail or tail[0] == "revision":
                    body = {"id": "/".join(rest.split("/")[:2]), "sha": commit_of(tail[1] if tail else None),
                            "siblings": [{"rfilename": f} for f in files]}
                else:  # tree/<revision>[/<folder>]: its entries, or every file below it (recursive)
                    base = repo.joinpath(*tail[2:])
                    recursive = urllib.parse.parse_qs(url.query).get("recursive", ["false"])[0].lower() == "true"
                    entries = base.rglob("*") if recursive else base.iterdir()
                    body = [{"type": "file", "oid": hashlib.sha1(e.read_bytes()).hexdigest(), "size": e.stat().st_size,
                             "path": str(e.relative_to(repo))} if e.is_file() else
                            {"type": "directory", "oid": "0" * 40, "size": 0, "path": str(e.relative_to(repo))}
                            for e in sorted(entries)]
                return self._send(200, json.dumps(body).encode(), [("Content-Type", "application/json")])
            if p.startswith("raw/"):   # a repository's file at a commit (raw.githubusercontent.com)
                f = root / p
                return self._send(200, f.read_bytes()) if f.is_file() else self._send(404, b"404: Not Found")
            kind = "models"
            if p.startswith("datasets/"): kind, p = "datasets", p.split("/", 1)[1]
            org, name, resolve, rev, fname = p.split("/", 4)
            f = root / kind / org / name / fname
            if resolve != "resolve" or not f.is_file(): return self._send(404, b"", [("X-Error-Code", "EntryNotFound")])
            data = f.read_bytes()
            return self._send(200, data, [("X-Repo-Commit", commit_of(rev)),
                                          ("ETag", '"%s"' % hashlib.sha1(data).hexdigest())])
    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, requests
