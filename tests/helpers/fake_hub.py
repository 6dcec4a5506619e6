"""A loopback fake of the Hugging Face Hub HTTP API: enough of it for `HfApi.create_repo` / `upload_folder`,
`ModelCard` validation, and downloads by repo id (`hf_hub_download`, `snapshot_download`, transformers'
`from_pretrained(repo_id, trust_remote_code=True)`).

Point a process at it with `HF_ENDPOINT=hub.url` set *before* huggingface_hub is imported (it reads the variable,
and derives trusted hosts from it, at import time). Stdlib only; repos live in memory.

What it answers (shapes checked against huggingface_hub 2.4's `_commit_api.py`, `_upload_pipeline.py`,
`file_download.py`, `hf_api.py`):
  POST /api/repos/create                                   -> {"url"}; 409 (with "url") if it exists
  POST /api/validate-yaml                                  -> YAML front matter must be a mapping; model-index shape
  POST /api/models/{repo}/preupload/{rev}                  -> uploadMode "regular" for every file (so no LFS and no
                                                              Xet negotiation), the remote git blob oid if present
  POST /api/models/{repo}/commit/{rev}                     -> NDJSON header + file/deletedFile/deletedFolder ops
                                                              (base64 content); "lfsFile" is refused with 422
  GET  /api/models/{repo}[/revision/{rev}]                 -> model info with sha and siblings
  GET  /api/models/{repo}/tree/{rev}[/{path}]              -> file listing (one page, no Link header)
  POST /api/models/{repo}/paths-info/{rev}                 -> info for the requested paths
  HEAD/GET /{repo}/resolve/{rev}/{path}                    -> X-Repo-Commit, ETag (git blob oid), Content-Length;
                                                              404 with X-Error-Code EntryNotFound / RepoNotFound /
                                                              RevisionNotFound as the real Hub does
No X-Xet-Hash header is ever sent, so downloads are plain HTTP GETs.

Test hooks: `hub.fail("commit", status=503, times=2, repo="org/x")` makes the next 2 requests to that endpoint
(for that repo; any repo if None) fail; `hub.calls("commit", repo)` counts requests; `hub.file(repo_id, path)`
reads a committed file;
`FakeHub(token="hf_x")` rejects writes (create, preupload, commit) without that bearer token (401).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

_REPO = r"(?P<repo>[^/]+/[^/]+)"
_REV = r"(?P<rev>[^/]+)"
ROUTES = [  # (method, endpoint name, pattern on the unquoted-later path)
    ("POST", "create", re.compile(r"^/api/repos/create$")),
    ("POST", "validate-yaml", re.compile(r"^/api/validate-yaml$")),
    ("POST", "preupload", re.compile(rf"^/api/models/{_REPO}/preupload/{_REV}$")),
    ("POST", "commit", re.compile(rf"^/api/models/{_REPO}/commit/{_REV}$")),
    ("POST", "paths-info", re.compile(rf"^/api/models/{_REPO}/paths-info/{_REV}$")),
    ("GET", "tree", re.compile(rf"^/api/models/{_REPO}/tree/{_REV}(?:/(?P<path>.+))?$")),
    ("GET", "info", re.compile(rf"^/api/models/{_REPO}(?:/revision/{_REV})?$")),
    ("HEAD", "resolve", re.compile(rf"^/{_REPO}/resolve/{_REV}/(?P<path>.+)$")),
    ("GET", "resolve", re.compile(rf"^/{_REPO}/resolve/{_REV}/(?P<path>.+)$")),
]
WRITE_ENDPOINTS = {"create", "preupload", "commit"}


def git_blob_oid(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


@dataclass
class Commit:
    oid: str
    summary: str
    files: dict[str, bytes]


@dataclass
class Repo:
    commits: list[Commit] = field(default_factory=list)

    def at(self, revision: str) -> Commit | None:
        if revision == "main":
            return self.commits[-1]
        return next((c for c in self.commits if c.oid.startswith(revision) and len(revision) >= 7), None)


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, commit: str | None = None, **extra):
        super().__init__(message)
        self.status, self.message, self.code, self.commit, self.extra = status, message, code, commit, extra


class FakeHub:
    def __init__(self, token: str | None = None):
        self.token = token
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str, str | None, str, int]] = []  # method, endpoint, repo, path, status
        self._failures: list[tuple[str, str | None, int]] = []  # endpoint, repo (None: any), status
        self._lock = threading.RLock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                hub._handle(self, "GET")

            def do_HEAD(self):
                hub._handle(self, "HEAD")

            def do_POST(self):
                hub._handle(self, "POST")

            def log_message(self, *args):  # keep test output quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ------------------------------------------------------------------ test hooks
    def fail(self, endpoint: str, status: int = 503, times: int = 1, repo: str | None = None) -> None:
        """Answer the next `times` requests to `endpoint` (a ROUTES name) about `repo` (any if None) with `status`."""
        with self._lock:
            self._failures += [(endpoint, repo, status)] * times

    def clear_failures(self) -> None:
        with self._lock:
            self._failures.clear()

    def calls(self, endpoint: str, repo: str | None = None) -> int:
        with self._lock:
            return sum(name == endpoint and repo in (None, r) for _, name, r, _, _ in self.requests)

    def file(self, repo_id: str, path: str, revision: str = "main") -> bytes:
        return self.repos[repo_id].at(revision).files[path]

    # ------------------------------------------------------------------ HTTP plumbing
    def _handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(request.path)
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        name, repo, status, headers, payload = "unknown", None, 404, {}, b""
        try:
            for route_method, route_name, pattern in ROUTES:
                match = pattern.match(url.path)
                if match and route_method == method:
                    name = route_name
                    break
            else:
                raise HubError(404, f"no route for {method} {url.path}")
            args = {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
            repo = args.get("repo") or (self._created_repo_id(json.loads(body)) if name == "create" else None)
            with self._lock:
                for i, (endpoint, only_repo, failure) in enumerate(self._failures):
                    if endpoint == name and only_repo in (None, repo):
                        del self._failures[i]
                        raise HubError(failure, f"injected failure {failure}")
                if name in WRITE_ENDPOINTS and self.token is not None:
                    if request.headers.get("Authorization") != f"Bearer {self.token}":
                        raise HubError(401, "Invalid credentials in Authorization header")
                status, headers, payload = 200, *getattr(self, "_" + name.replace("-", "_"))(
                    body=body, query=parse_qs(url.query), **args)
        except HubError as error:
            status, payload = error.status, json.dumps({"error": error.message, **error.extra}).encode()
            headers = {"X-Error-Message": error.message, "Content-Type": "application/json"}
            if error.code:
                headers["X-Error-Code"] = error.code
            if error.commit:
                headers["X-Repo-Commit"] = error.commit
        except Exception as error:  # a bug in the fake: answer like a broken server rather than drop the socket
            status, headers, payload = 500, {"X-Error-Message": repr(error)[:200]}, repr(error).encode()
        with self._lock:
            self.requests.append((method, name, repo, url.path, status))
        if isinstance(payload, (dict, list)):
            payload, headers = json.dumps(payload).encode(), {"Content-Type": "application/json", **headers}
        request.send_response(status)
        for key, value in {"Content-Length": str(len(payload)), **headers}.items():
            request.send_header(key, value)
        request.end_headers()
        if method != "HEAD":
            request.wfile.write(payload)

    def _repo(self, repo: str) -> Repo:
        if repo not in self.repos:
            raise HubError(404, "Repository not found", code="RepoNotFound")
        return self.repos[repo]

    def _commit_at(self, repo: str, rev: str) -> Commit:
        commit = self._repo(repo).at(rev)
        if commit is None:
            raise HubError(404, f"Invalid rev id: {rev}", code="RevisionNotFound")
        return commit

    def _file_entries(self, commit: Commit, paths) -> list[dict]:
        return [{"type": "file", "path": p, "size": len(commit.files[p]), "oid": git_blob_oid(commit.files[p])}
                for p in sorted(paths) if p in commit.files]

    # ------------------------------------------------------------------ endpoints: (headers, payload)
    @staticmethod
    def _created_repo_id(request: dict) -> str:
        return f"{request.get('organization') or 'user'}/{request['name']}"

    def _create(self, body, query):
        repo_id = self._created_repo_id(json.loads(body))
        if repo_id in self.repos:
            raise HubError(409, "You already created this model repo", url=f"{self.url}/{repo_id}")
        initial = {".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"}
        self.repos[repo_id] = Repo([Commit(git_blob_oid(repo_id.encode()), "initial commit", initial)])
        return {}, {"url": f"{self.url}/{repo_id}", "name": repo_id, "id": repo_id}

    def _validate_yaml(self, body, query):
        content = json.loads(body)["content"]
        match = re.match(r"^---\n(.*?)\n---\n", content, re.S)
        try:
            metadata = yaml.safe_load(match.group(1)) if match else {}
            if not isinstance(metadata, dict):
                raise ValueError("metadata must be a mapping")
            for model in metadata.get("model-index", []):
                for result in model["results"]:
                    assert result["task"]["type"] and result["dataset"]["type"] and result["dataset"]["name"]
                    assert all("type" in m and isinstance(m["value"], (int, float)) for m in result["metrics"])
        except Exception as error:  # noqa: BLE001 - any malformed card is a 400, like the Hub
            raise HubError(400, "invalid metadata", errors=[{"message": repr(error)}]) from error
        return {}, {"errors": [], "warnings": []}

    def _preupload(self, body, query, repo, rev):
        commit = self._commit_at(repo, rev)
        files = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                  "oid": git_blob_oid(commit.files[f["path"]]) if f["path"] in commit.files else None}
                 for f in json.loads(body)["files"]]
        return {}, {"files": files, "commitOid": commit.oid}

    def _commit(self, body, query, repo, rev):
        parent = self._commit_at(repo, rev)
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        header = next(line["value"] for line in lines if line["key"] == "header")
        if header.get("parentCommit") and not parent.oid.startswith(header["parentCommit"]):
            raise HubError(412, "parent commit is not the head of the branch")
        files = dict(parent.files)
        for line in lines:
            key, value = line["key"], line["value"]
            if key == "file":
                files[value["path"]] = base64.b64decode(value["content"])
            elif key == "deletedFile":
                files.pop(value["path"], None)
            elif key == "deletedFolder":
                files = {p: c for p, c in files.items() if not p.startswith(value["path"].rstrip("/") + "/")}
            elif key != "header":
                raise HubError(422, f"unsupported commit operation {key!r} (the fake hub only takes regular files)")
        oid = hashlib.sha1(parent.oid.encode() + body).hexdigest()
        self.repos[repo].commits.append(Commit(oid, header["summary"], files))
        return {}, {"success": True, "commitOid": oid, "commitUrl": f"{self.url}/{repo}/commit/{oid}",
                    "hookOutput": ""}

    def _paths_info(self, body, query, repo, rev):
        paths = parse_qs(body.decode()).get("paths", [])  # form-encoded, as HfApi.get_paths_info sends it
        return {}, self._file_entries(self._commit_at(repo, rev), paths)

    def _tree(self, body, query, repo, rev, path=""):
        commit = self._commit_at(repo, rev)
        prefix = path.strip("/") + "/" if path else ""
        under = [p for p in commit.files if p.startswith(prefix)]
        if path and not under:
            raise HubError(404, f"{path} does not exist", code="EntryNotFound", commit=commit.oid)
        if query.get("recursive", ["false"])[0].lower() != "true":
            folders = sorted({prefix + p[len(prefix):].split("/")[0] for p in under if "/" in p[len(prefix):]})
            under = [p for p in under if "/" not in p[len(prefix):]]
            return {}, self._file_entries(commit, under) + [{"type": "directory", "path": f, "oid": "0" * 40,
                                                             "size": 0} for f in folders]
        return {}, self._file_entries(commit, under)

    def _info(self, body, query, repo, rev="main"):
        commit = self._commit_at(repo, rev)
        siblings = [{"rfilename": path, "size": len(content), "blobId": git_blob_oid(content)}
                    for path, content in sorted(commit.files.items())]
        return {}, {"id": repo, "modelId": repo, "sha": commit.oid, "private": False, "disabled": False,
                    "gated": False, "tags": [], "siblings": siblings}

    def _resolve(self, body, query, repo, rev, path):
        commit = self._commit_at(repo, rev)
        if path not in commit.files:
            raise HubError(404, "Entry not found", code="EntryNotFound", commit=commit.oid)
        content = commit.files[path]
        headers = {"X-Repo-Commit": commit.oid, "ETag": f'"{git_blob_oid(content)}"',
                   "Content-Type": "application/octet-stream", "Accept-Ranges": "none"}
        return headers, content
