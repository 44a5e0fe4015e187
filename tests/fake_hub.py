"""A local stand-in for the Hugging Face Hub for tests: repositories are folders
(``<root>/models/<org>/<name>/...``, ``<root>/datasets/<org>/<name>/...``) served on 127.0.0.1 with the
endpoints huggingface_hub and datasets call (repo info, tree listing, paths-info, resolve); point
``HF_ENDPOINT`` at :func:`serve`'s address. Every repository has one revision, :data:`SHA`."""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SHA = "0123456789abcdef0123456789abcdef01234567"

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
                    body = {"id": "/".join(rest.split("/")[:2]), "sha": SHA, "siblings": [{"rfilename": f} for f in files]}
                else:  # tree/<revision>[/<folder>]: its entries, or every file below it (recursive)
                    base = repo.joinpath(*tail[2:])
                    recursive = urllib.parse.parse_qs(url.query).get("recursive", ["false"])[0].lower() == "true"
                    entries = base.rglob("*") if recursive else base.iterdir()
                    body = [{"type": "file", "oid": hashlib.sha1(e.read_bytes()).hexdigest(), "size": e.stat().st_size,
                             "path": str(e.relative_to(repo))} if e.is_file() else
                            {"type": "directory", "oid": "0" * 40, "size": 0, "path": str(e.relative_to(repo))}
                            for e in sorted(entries)]
                return self._send(200, json.dumps(body).encode(), [("Content-Type", "application/json")])
            kind = "models"
            if p.startswith("datasets/"): kind, p = "datasets", p.split("/", 1)[1]
            org, name, resolve, rev, fname = p.split("/", 4)
            f = root / kind / org / name / fname
            if resolve != "resolve" or not f.is_file(): return self._send(404, b"", [("X-Error-Code", "EntryNotFound")])
            data = f.read_bytes()
            return self._send(200, data, [("X-Repo-Commit", SHA), ("ETag", '"%s"' % hashlib.sha1(data).hexdigest())])
    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, requests
