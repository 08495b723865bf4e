"""The one place that talks to the Hugging Face hub (through huggingface_hub), and what we rely on:

* ``model_info(repo, revision=<40 hex>, files_metadata=True)``: the resolved commit and each file's size, git blob
  id and LFS sha256, the trusted record the downloaded bytes are checked against;
* ``snapshot_download`` resumes a file cut mid-transfer (HTTP ``Range``), skips a complete one whose recorded
  commit matches, never reuses a killed process's partial files (:func:`drop_partials` removes them); it records
  each file's ``X-Repo-Commit``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import DownloadError, UsageError, one_line
from ..core.redact import env_secrets, redact, redact_url

DEFAULT_ENDPOINT = "https://huggingface.co"
LOGIN_FIX = "run `hf auth login` (or set HF_TOKEN) with an account that has accepted the model's terms"


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int | None
    blob_id: str | None          # git blob sha1 (for an LFS file: of its pointer)
    lfs_sha256: str | None       # None: a regular git file


@dataclass(frozen=True)
class HubSnapshot:
    resolved_revision: str
    files: tuple[HubFile, ...]


def endpoint(environ: dict[str, str] | None = None) -> str:
    """``HF_ENDPOINT`` (or huggingface.co) read at call time (huggingface_hub reads it once, at import).  Not an
    http(s) URL with a host: a usage error naming the variable (huggingface_hub would fail later, unclearly)."""
    from urllib.parse import urlsplit

    env = os.environ if environ is None else environ
    value = (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    problem = None
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        problem = str(exc)
    else:
        if parts.scheme not in ("http", "https"):
            problem = f"scheme {parts.scheme or '(none)'!r}"
        elif not parts.hostname:
            problem = "no host name"
        elif any(c.isspace() for c in value):
            problem = "white space in it"
    if problem is not None:
        raise UsageError("HF_ENDPOINT is not a hub URL", expected="an http:// or https:// URL such as "
                         f"{DEFAULT_ENDPOINT}", found=f"{redact_url(value)!r} ({problem})",
                         fix="set HF_ENDPOINT to the hub (or mirror) URL, or unset it to use huggingface.co")
    return value


def shown_endpoint() -> str:
    """The endpoint as it may be written to a manifest or a message (no URL credentials)."""
    return redact_url(endpoint())


def secrets() -> list[str]:
    """Token values to mask: the environment's, and the one ``hf auth login`` stored."""
    try:
        from huggingface_hub import get_token

        tok = get_token()
    except Exception:  # noqa: BLE001 - a broken token store must not break error reporting
        tok = None
    return [*env_secrets(), *([tok] if tok else [])]


def clean(text: str) -> str:
    """Mask every token-looking thing in text that came from the hub or its exceptions."""
    return redact(text, secrets())


class _Masked(logging.Filter):
    """huggingface_hub's warnings ("Error while downloading from URL ...") name the URL: the endpoint's
    ``user:password@`` and the CDN's presigned query; they pass through :func:`clean` like our own lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = clean(record.getMessage()), None
        return True


def _mask_hub_logs() -> None:
    from huggingface_hub.utils import logging as hf_logging

    for h in hf_logging.get_logger().handlers:
        if not any(isinstance(f, _Masked) for f in h.filters):
            h.addFilter(_Masked())


def _first_lines(exc: BaseException, n: int = 3) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return clean(" ".join(lines[:n]).rstrip(".") or type(exc).__name__)


def _map_error(exc: BaseException, repo: str, revision: str, what: str) -> DownloadError:
    import httpx2
    from huggingface_hub import errors as hf

    where = f"{repo}@{revision}"
    access = "an authenticated account with access to the repository"

    def error(problem: str, expected: str | None, fix: str) -> DownloadError:
        return DownloadError(f"{what}: {problem}", expected=expected, found=_first_lines(exc), fix=fix)

    if isinstance(exc, hf.GatedRepoError):
        return error(f"{where} is a gated repository and access was refused", access, LOGIN_FIX)
    if isinstance(exc, hf.RevisionNotFoundError):
        return error(f"revision {revision} does not exist in {repo}", f"the pinned revision {revision} on the hub",
                     "check [models.<format>].revision in the recipe (a force-pushed or deleted commit cannot be "
                     "fetched)")
    if isinstance(exc, hf.RemoteEntryNotFoundError):
        return error(f"a file listed for {where} is missing on the hub", "every listed file to be downloadable",
                     "check the recipe's patterns and revision")
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, hf.HfHubHTTPError) and status in (401, 403):
        return error(f"the hub refused access to {where} (HTTP {status})", access, LOGIN_FIX)
    if isinstance(exc, hf.RepositoryNotFoundError):
        return error(f"repository {repo} was not found", f"a model repository '{repo}' on {shown_endpoint()}",
                     "check [models.<format>].repo in the recipe; if the repository is private or gated, " + LOGIN_FIX)
    if isinstance(exc, hf.OfflineModeIsEnabled):
        return error("huggingface_hub is in offline mode (HF_HUB_OFFLINE)", "network access to the hub",
                     "unset HF_HUB_OFFLINE, or pass --offline to re-verify an existing copy")
    if isinstance(exc, (httpx2.ConnectError, httpx2.TimeoutException, httpx2.NetworkError,
                        httpx2.RemoteProtocolError, hf.LocalEntryNotFoundError)):
        return error(f"could not reach the hub at {shown_endpoint()}", "a working connection to the hub",
                     "check the network, proxy and HF_ENDPOINT, then re-run: it keeps the files already complete "
                     "and fetches the others from their start; --offline re-verifies a copy that is already complete")
    if isinstance(exc, hf.HfHubHTTPError):
        return error(f"the hub answered with an error for {where}", "a successful answer",
                     "retry later; if it persists check the hub's status page")
    if isinstance(exc, json.JSONDecodeError):      # a 200 that is not the API's JSON: a proxy or captive portal page
        body = exc.doc if isinstance(exc.doc, str) else ""
        first = one_line(clean(body.lstrip()), 120) if body.strip() else "an empty body"
        return DownloadError(f"{what}: the hub at {shown_endpoint()} did not answer with JSON for {where}",
                             expected="the hub's JSON API answer",
                             found=f"a body starting {first!r}" if body.strip() else first,
                             fix="check HF_ENDPOINT (the hub, or a mirror of its API) and the proxy settings "
                                 "(HTTPS_PROXY / HTTP_PROXY / NO_PROXY): a proxy's login or block page answers "
                                 "like this; open the URL in a browser or with curl to see the page")
    if isinstance(exc, OSError):
        return error(f"{where} could not be written or read", "a complete transfer into the local directory",
                     "check free disk space and permissions, then re-run (completed files are kept)")
    return error(f"unexpected failure for {where}", None, "re-run; if it persists report it with the message above")


@contextmanager
def _hub_errors(repo: str, revision: str, what: str) -> Iterator[None]:
    import httpx2
    from huggingface_hub import errors as hf

    try:
        yield
    except DownloadError:
        raise
    except (hf.HfHubHTTPError, hf.OfflineModeIsEnabled, hf.LocalEntryNotFoundError, httpx2.HTTPError,
            OSError, ValueError) as exc:
        raise _map_error(exc, repo, revision, what) from None


def select(paths: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """The repository paths a selection's patterns match, exactly as snapshot_download filters them."""
    from huggingface_hub.utils import filter_repo_objects

    return sorted(filter_repo_objects(items=list(paths), allow_patterns=list(patterns)))


HUB_TIMEOUT_S = 30.0   # huggingface_hub sets no timeout on API calls: a hub or proxy that accepts and stalls would hang forever


def fetch_snapshot_info(repo: str, revision: str, patterns: Sequence[str]) -> HubSnapshot:
    """Ask the hub what ``repo`` holds at ``revision``: resolved commit and per-file metadata."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint(), library_name="october")
    with _hub_errors(repo, revision, "reading the model's file list"):
        try:
            info = api.model_info(repo, revision=revision, files_metadata=True, timeout=HUB_TIMEOUT_S)
        except (TypeError, KeyError, AttributeError) as exc:   # JSON, but not a model's: huggingface_hub cannot read it
            raise DownloadError(f"reading the model's file list: the hub at {shown_endpoint()} answered {repo}@"
                                f"{revision} with JSON that is not a model listing",
                                expected="the hub's model information (an object with id, sha and siblings)",
                                found=_first_lines(exc),
                                fix="check HF_ENDPOINT (the hub, or a mirror of its API) and the proxy settings "
                                    "(HTTPS_PROXY / HTTP_PROXY / NO_PROXY)") from None
    by_path = {s.rfilename: s for s in info.siblings or []}
    files = []
    for p in select(list(by_path), patterns):
        _check_repo_path(repo, revision, p)
        s = by_path[p]
        lfs = s.lfs.sha256.lower() if s.lfs is not None and s.lfs.sha256 else None
        size = s.lfs.size if s.lfs is not None else s.size
        files.append(HubFile(path=p, size=size, blob_id=s.blob_id, lfs_sha256=lfs))
    return HubSnapshot(resolved_revision=info.sha or "", files=tuple(files))


def _check_repo_path(repo: str, revision: str, path: str) -> None:
    if not path or path.startswith("/") or "\\" in path or any(x in ("", ".", "..") for x in path.split("/")):
        raise DownloadError(f"the hub listed an unsafe file name in {repo}@{revision}",
                            expected="a relative path without '..' or empty parts", found=repr(path),
                            fix="do not use this repository/revision; report it")


def forwarding_tqdm(report: Callable[[float, float | None], None] | None, total: float | None = None) -> type:
    """huggingface_hub's tqdm, drawing nothing, forwarding the bytes written to ``report(done, total)`` (None:
    nothing).  Only the byte bar of the written files (unit "B") is forwarded, not the file-count bar or
    the network-side "Downloading" one.

    ``total``: the bytes of the whole selection, from the hub's listing.  huggingface_hub's own total grows as
    each file starts (its bar would go 100%, 80%, 60% ... as files join), so with ``total`` that one is used
    throughout, and ``done`` (all threads summed, under one lock) is never reported lower than before nor
    above ``total``: the percentage only rises."""
    import threading

    from huggingface_hub.utils.tqdm import tqdm as hf_tqdm

    lock = threading.Lock()
    shown = [-1.0]

    class Forward(hf_tqdm):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):  # noqa: ANN002, ANN003
            self._forward = kwargs.get("unit") == "B" and not str(kwargs.get("desc", "")).startswith("Downloading")
            self._done = float(kwargs.get("initial") or 0)
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> None:
            with lock:
                self._done += float(n or 0)
                if not self._forward or report is None:
                    return
                if total is None:
                    report(self._done, float(self.total) if self.total else None)
                    return
                done = min(max(self._done, 0.0), total)
                if done > shown[0]:
                    shown[0] = done
                    report(done, total)

    return Forward


def download_snapshot(repo: str, revision: str, patterns: Sequence[str], local_dir: Path, *,
                      quiet: bool = False, max_workers: int = 8,
                      report: Callable[[float, float | None], None] | None = None,
                      total: float | None = None, user_cache: bool = True) -> Path:
    """``snapshot_download`` of the matching files at ``revision`` into ``local_dir``; with
    ``report``, progress goes there (bytes written, ``total``: the selection's bytes from the listing, shown
    from the start; files already complete count when the download ends) instead of huggingface_hub's bars.
    huggingface_hub copies a file its own cache (``~/.cache/huggingface/hub``) holds instead of downloading it;
    ``user_cache=False`` points it at a cache folder that holds nothing (a bad blob there came back on every
    re-run)."""
    from huggingface_hub import snapshot_download

    _mask_hub_logs()
    cache = {} if user_cache else {"cache_dir": str(local_dir / ".october" / "no-hf-cache")}
    tqdm_class = forwarding_tqdm(None) if quiet else None if report is None else forwarding_tqdm(report, total)
    if report is not None and not quiet and total is not None:
        report(0.0, total)
    with _hub_errors(repo, revision, "downloading the model"):
        out = snapshot_download(repo, revision=revision, local_dir=str(local_dir),
                                allow_patterns=list(patterns), endpoint=endpoint(),
                                library_name="october", max_workers=max_workers, tqdm_class=tqdm_class, **cache)
    if report is not None and not quiet and total is not None:
        report(total, total)
    return Path(out)


def _metadata_path(local_dir: Path, path: str) -> Path:
    # huggingface_hub's layout; first line the commit hash, second the ETag, third a timestamp
    return local_dir / ".cache" / "huggingface" / "download" / f"{path}.metadata"


def recorded_commits(local_dir: Path, paths: Sequence[str]) -> dict[str, str | None]:
    """Per file, the commit the hub named (``X-Repo-Commit``) when huggingface_hub fetched it."""
    out: dict[str, str | None] = {}
    for p in paths:
        try:
            lines = _metadata_path(local_dir, p).read_text(encoding="utf-8").splitlines()
            out[p] = lines[0].strip() or None
        except (OSError, IndexError, UnicodeDecodeError):
            out[p] = None
    return out


def drop_partials(local_dir: Path) -> int:
    """Remove the partial files a killed download left (their number).  huggingface_hub writes each file to a
    ``<hash>.<etag>.<random>.incomplete`` of that process alone and removes it when the transfer fails; a
    killed process cannot, and no later one reuses it.  Called under the directory's lock, so none is live."""
    partials = [p for p in (local_dir / ".cache" / "huggingface" / "download").rglob("*.incomplete") if p.is_file()]
    for p in partials:
        p.unlink(missing_ok=True)
    return len(partials)


def forget_file(local_dir: Path, path: str) -> None:
    """Drop huggingface_hub's download record for a file we moved aside, so a re-run refetches it."""
    _metadata_path(local_dir, path).unlink(missing_ok=True)
