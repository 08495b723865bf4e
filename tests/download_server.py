"""A loopback stand-in for the part of the Hugging Face hub that huggingface_hub's
``model_info(files_metadata=True)`` and ``snapshot_download(revision=<commit>, local_dir=...)``
use (read from huggingface_hub 2.4's source):

* ``GET /api/models/{org}/{name}/revision/{rev}?blobs=true`` -> ``sha`` and ``siblings``
  (``rfilename``, ``size``, ``blobId``, ``lfs: {size, sha256, pointerSize}``);
* ``GET /api/models/{org}/{name}/tree/{rev}?recursive=..&expand=..`` -> file entries
  (``type``, ``path``, ``size``, ``oid``, ``lfs: {oid, size, pointerSize}``), one page;
* ``HEAD|GET /{org}/{name}/resolve/{rev}/{file}``: a regular file answers 200 with
  ``ETag: "<git blob id>"``, ``X-Repo-Commit`` and ``Content-Length``; an LFS file answers
  302 to a separate "CDN" server (another port, so another origin: huggingface_hub drops the
  Authorization header there, as it does for the real CDN) with ``X-Linked-Etag: "<sha256>"``,
  ``X-Linked-Size`` and ``X-Repo-Commit``. No ``X-Xet-*`` header is ever sent, so
  huggingface_hub never tries the xet protocol;
* errors carry the hub's ``X-Error-Code`` / ``X-Error-Message`` headers
  (``RevisionNotFound``, ``RepoNotFound``, ``EntryNotFound``, ``GatedRepo``).

The CDN honours ``Range: bytes=N-`` (206 + ``Content-Range``). Fault modes: ``corrupt``
serves other bytes than the advertised LFS sha256 (same length); ``cut_after`` closes the
connection after N body bytes on the first full GET of a file; ``gated`` answers 401 on
resolve; ``report_sha`` makes the API report another commit than the one asked for; ``api_page``
answers every API call with 200 and that HTML page (a proxy's login page in front of the hub).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {size}\n"


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class FakeRepo:
    repo_id: str
    revision: str
    files: dict[str, bytes]
    lfs: set[str]
    gated: bool = False

    def pointer(self, path: str) -> bytes:
        data = self.files[path]
        return LFS_POINTER.format(sha=sha256(data), size=len(data)).encode()

    def blob_id(self, path: str) -> str:
        return git_blob_id(self.pointer(path) if path in self.lfs else self.files[path])


@dataclass
class Seen:
    server: str          # "hub" | "cdn"
    method: str
    path: str
    range: str | None
    authorization: str | None


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    corrupt: set[tuple[str, str]] = field(default_factory=set)
    cut_after: dict[tuple[str, str], int] = field(default_factory=dict)
    report_sha: dict[str, str] = field(default_factory=dict)
    api_page: str | None = None
    seen: list[Seen] = field(default_factory=list)
    body_bytes: Counter = field(default_factory=Counter)   # (repo, path) -> body bytes sent
    _cut_done: set[tuple[str, str]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""
    cdn_url: str = ""

    def add(self, repo: FakeRepo) -> FakeRepo:
        self.repos[repo.repo_id] = repo
        return repo

    def requests(self, server: str | None = None, method: str | None = None) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if (server is None or s.server == server)
                    and (method is None or s.method == method)]

    def gets_of(self, path_suffix: str) -> list[Seen]:
        return [s for s in self.requests(method="GET") if s.path.endswith("/" + path_suffix)
                or s.path.endswith(path_suffix)]

    def _lfs_by_sha(self, repo_key: str, sha: str) -> tuple[FakeRepo, str] | None:
        for repo in self.repos.values():
            if repo.repo_id.replace("/", "__") != repo_key:
                continue
            for p in repo.lfs:
                if sha256(repo.files[p]) == sha:
                    return repo, p
        return None

    def served_bytes(self, repo: FakeRepo, path: str) -> bytes:
        data = repo.files[path]
        if (repo.repo_id, path) in self.corrupt:
            return bytes(b ^ 0xFF for b in data[:64]) + data[64:]
        return data


# ------------------------------------------------------------------ handlers


class _Base(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_name_ = "?"
    hub: FakeHub

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep test output quiet
        pass

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch()

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch()

    def _dispatch(self) -> None:
        raise NotImplementedError

    def _record(self) -> None:
        with self.hub._lock:
            self.hub.seen.append(Seen(self.server_name_, self.command, urlsplit(self.path).path,
                                      self.headers.get("Range"), self.headers.get("Authorization")))

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
              content_type: str = "application/json", head: bool = False) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and not head:
            self.wfile.write(body)

    def _error(self, status: int, code: str | None, message: str, extra: dict[str, str] | None = None) -> None:
        headers = {"X-Error-Message": message, **(extra or {})}
        if code:
            headers["X-Error-Code"] = code
        self._send(status, json.dumps({"error": message}).encode(), headers, head=self.command == "HEAD")

    def _body(self, data: bytes, headers: dict[str, str], key: tuple[str, str]) -> None:
        """200 or 206 (Range), honouring the cut-after fault on the first full GET."""
        head = self.command == "HEAD"
        rng = self.headers.get("Range")
        start = 0
        status = 200
        if rng:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
            if not m or int(m.group(1)) >= len(data):
                self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"}, head=head)
                return
            start = int(m.group(1))
            end = int(m.group(2)) if m.group(2) else len(data) - 1
            data_out = data[start:end + 1]
            status = 206
            headers = {**headers, "Content-Range": f"bytes {start}-{start + len(data_out) - 1}/{len(data)}"}
        else:
            data_out = data
        headers = {**headers, "Accept-Ranges": "bytes"}
        cut = None
        if not head and not rng and key in self.hub.cut_after:
            with self.hub._lock:
                if key not in self.hub._cut_done:
                    self.hub._cut_done.add(key)
                    cut = self.hub.cut_after[key]
        if cut is None:
            self._send(status, data_out, headers, content_type="application/octet-stream", head=head)
            if not head:
                with self.hub._lock:
                    self.hub.body_bytes[key] += len(data_out)
            return
        # Promise the whole body, send part of it, drop the connection.
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data_out)))
        self.end_headers()
        self.wfile.write(data_out[:cut])
        self.wfile.flush()
        with self.hub._lock:
            self.hub.body_bytes[key] += cut
        self.close_connection = True


class _HubHandler(_Base):
    server_name_ = "hub"

    def _dispatch(self) -> None:
        self._record()
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        query = parse_qs(parts.query)
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/(revision|tree)/([^/]+)(/.*)?", path)
        if m and self.command == "GET":
            return self._api(m.group(1), m.group(2), m.group(3), query)
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            return self._resolve(m.group(1), m.group(2), m.group(3))
        self._error(404, None, "Sorry, we can't find the page you are looking for.")

    def _repo_at(self, repo_id: str, rev: str) -> FakeRepo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        if rev not in (repo.revision, "main"):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return None
        return repo

    def _api(self, repo_id: str, kind: str, rev: str, query: dict[str, list[str]]) -> None:
        if self.hub.api_page is not None:
            return self._send(200, self.hub.api_page.encode(), content_type="text/html; charset=utf-8")
        repo = self._repo_at(repo_id, rev)
        if repo is None:
            return
        sha = self.hub.report_sha.get(repo_id, repo.revision)
        if kind == "tree":
            entries = []
            for p in sorted(repo.files):
                e: dict[str, Any] = {"type": "file", "oid": repo.blob_id(p), "size": len(repo.files[p]), "path": p}
                if p in repo.lfs:
                    e["lfs"] = {"oid": sha256(repo.files[p]), "size": len(repo.files[p]),
                                "pointerSize": len(repo.pointer(p))}
                entries.append(e)
            return self._send(200, json.dumps(entries).encode())
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings = []
        for p in sorted(repo.files):
            s: dict[str, Any] = {"rfilename": p}
            if blobs:
                s["size"] = len(repo.files[p])
                s["blobId"] = repo.blob_id(p)
                if p in repo.lfs:
                    s["lfs"] = {"size": len(repo.files[p]), "sha256": sha256(repo.files[p]),
                                "pointerSize": len(repo.pointer(p))}
            siblings.append(s)
        info = {"_id": hashlib.md5(repo_id.encode()).hexdigest()[:24], "id": repo_id,  # noqa: S324
                "modelId": repo_id, "author": repo_id.split("/")[0], "sha": sha,
                "lastModified": "2025-04-30T00:00:00.000Z", "createdAt": "2025-04-01T00:00:00.000Z",
                "private": False, "disabled": False, "gated": "manual" if repo.gated else False,
                "downloads": 0, "likes": 0, "tags": ["safetensors"], "library_name": "transformers",
                "siblings": siblings}
        self._send(200, json.dumps(info).encode())

    def _resolve(self, repo_id: str, rev: str, file: str) -> None:
        repo = self._repo_at(repo_id, rev)
        if repo is None:
            return
        if repo.gated:
            return self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have access "
                               "to it and be authenticated to access it. Please log in.")
        commit = {"X-Repo-Commit": repo.revision}
        if file not in repo.files:
            return self._error(404, "EntryNotFound", f"{file} does not exist on \"{rev}\"", commit)
        if file in repo.lfs:
            data = repo.files[file]
            sha = sha256(data)
            loc = f"{self.hub.cdn_url}/repos/{repo_id.replace('/', '__')}/{sha}?X-Amz-Signature=fake&name={quote(file)}"
            return self._send(302, b"", {**commit, "Location": loc, "ETag": f'"{repo.blob_id(file)}"',
                                         "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(data))},
                              content_type="text/plain", head=self.command == "HEAD")
        self._body(repo.files[file], {**commit, "ETag": f'"{repo.blob_id(file)}"'}, (repo_id, file))


class _CdnHandler(_Base):
    server_name_ = "cdn"

    def _dispatch(self) -> None:
        self._record()
        m = re.fullmatch(r"/repos/([^/]+)/([0-9a-f]{64})", urlsplit(self.path).path)
        found = self.hub._lfs_by_sha(m.group(1), m.group(2)) if m else None
        if found is None:
            return self._send(404, b"NoSuchKey", content_type="text/plain", head=self.command == "HEAD")
        repo, path = found
        self._body(self.hub.served_bytes(repo, path), {"ETag": f'"{m.group(2)}"'}, (repo.repo_id, path))


def _serve(handler: type[_Base], hub: FakeHub) -> ThreadingHTTPServer:
    cls = type(handler.__name__, (handler,), {"hub": hub})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), cls)
    srv.daemon_threads = True
    srv.block_on_close = False
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return srv


class running:
    """``with running(FakeHub()) as hub:`` -- both servers up, ``hub.url`` / ``hub.cdn_url`` set."""

    def __init__(self, hub: FakeHub) -> None:
        self.hub = hub
        self.servers: list[ThreadingHTTPServer] = []

    def __enter__(self) -> FakeHub:
        for handler in (_HubHandler, _CdnHandler):
            self.servers.append(_serve(handler, self.hub))
        self.hub.url = f"http://127.0.0.1:{self.servers[0].server_address[1]}"
        self.hub.cdn_url = f"http://127.0.0.1:{self.servers[1].server_address[1]}"
        return self.hub

    def __exit__(self, *exc: object) -> None:
        for srv in self.servers:
            srv.shutdown()
            srv.server_close()


# ------------------------------------------------------------- model content


def safetensors_blob(rng: random.Random, tensors: dict[str, tuple[int, ...]]) -> bytes:
    """A valid safetensors file of float16 tensors with random bytes."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    payload = bytearray()
    for name, shape in tensors.items():
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        payload += rng.randbytes(n)
        offset += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + bytes(payload)


def model_files(*, num_layers: int = 4, shards: int = 2, hidden: int = 64, seed: int = 0,
                quant: str | None = None) -> tuple[dict[str, bytes], set[str]]:
    """Small files shaped like a Qwen3 checkpoint; returns (files, lfs paths)."""
    rng = random.Random(seed)
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": num_layers,
              "hidden_size": hidden, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 128,
              "torch_dtype": "float16", "vocab_size": 256}
    if quant:
        config["quantization_config"] = {"quant_method": quant, "bits": 4, "group_size": 128}
    files: dict[str, bytes] = {
        "config.json": json.dumps(config, indent=2).encode(),
        "generation_config.json": json.dumps({"do_sample": True, "temperature": 0.6}).encode(),
        "tokenizer_config.json": json.dumps({"model_max_length": 40960}).encode(),
        "vocab.json": json.dumps({f"t{i}": i for i in range(256)}).encode(),
        "merges.txt": b"#version: 0.2\n" + b"".join(b"t%d t%d\n" % (i, i + 1) for i in range(64)),
        "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "BPE"},
                                      "pad": rng.randbytes(2048).hex()}).encode(),
        "README.md": b"# fake model\n",
        ".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n",
        "original/consolidated.pth": rng.randbytes(4096),   # matched by no pattern: never fetched
    }
    weight_map = {}
    total = 0
    per = max(1, num_layers // shards)
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {f"model.layers.{i}.mlp.weight": (hidden, hidden * 8)
                   for i in range(s * per, num_layers if s == shards - 1 else (s + 1) * per)}
        files[name] = safetensors_blob(rng, tensors)
        total += len(files[name])
        weight_map.update({t: name for t in tensors})
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2).encode()
    lfs = {p for p in files if p.endswith((".safetensors", ".pth")) or p == "tokenizer.json"}
    return files, lfs
