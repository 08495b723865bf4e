"""``current verify --install STACK``: is the live stack still what its lock and receipts say?

Offline and read-only: no network, no install, no write into the stack.  Every difference is
collected first (pypa/installer's ``validate_record`` style), then reported together:

* the lock file is the one the setup receipt recorded (sha256);
* each fork clone: HEAD at the locked ``commit-id``, no local changes (unless the receipt
  recorded the tree as dirty under ``--allow-dirty``), submodules at the commits fetch recorded;
* every distribution in the stack env against the lock: nothing extra, nothing missing, the
  locked version; forks installed editable from ``STACK/src/<fork>``;
* every file each distribution's RECORD lists with a hash still has that hash (and exists);
* torch is the locked build (version with its local tag, e.g. ``2.10.0+cu128``);
* the base wheel in ``STACK/wheels`` has the locked sha256;
* every JIT library has the sha256 the lock recorded.

Distributions are read from their ``.dist-info`` directories (no process is started), so a
stack whose Python no longer runs can still be verified.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence
from urllib.parse import unquote, urlparse

from packaging.utils import canonicalize_name

from october.installer.core.errors import LockError, StateError
from october.installer.core.hashing import CHUNK, sha256_file
from october.installer.core.paths import StackPaths
from october.installer.pipeline.engine import read_marker
from october.installer.steps.lock.pylock import TOOL, read_lock

MAX_FILES_LISTED = 20


@dataclass(frozen=True)
class Difference:
    check: str          # forks | distributions | files | torch | wheel | jit | lock
    what: str
    expected: str
    found: str

    def line(self) -> str:
        return f"[{self.check}] {self.what}: expected {self.expected}, found {self.found}"

    def as_json(self) -> dict[str, str]:
        return {"check": self.check, "what": self.what, "expected": self.expected, "found": self.found}


@dataclass(frozen=True)
class VerifyReport:
    stack: Path
    lock_sha256: str
    checked: Mapping[str, int]                    # check -> how many items were looked at
    differences: tuple[Difference, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.differences

    def as_json(self) -> dict[str, Any]:
        return {"stack": str(self.stack), "ok": self.ok, "lock_sha256": self.lock_sha256,
                "checked": dict(self.checked), "differences": [d.as_json() for d in self.differences]}

    def error(self) -> LockError:
        lines = "\n".join(f"  - {d.line()}" for d in self.differences)
        return LockError(f"the stack {self.stack} differs from its lock in {len(self.differences)} place(s):\n{lines}",
                         fix=f"re-run `october_setup {self.stack} --locked` to put it back as locked, or "
                             "re-run october_setup without --locked to record the change deliberately")


# ---------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Dist:
    name: str                        # canonical
    version: str
    info: Path                       # the .dist-info directory
    direct_url: Mapping[str, Any] | None

    @property
    def site(self) -> Path:
        return self.info.parent

    @property
    def editable_path(self) -> Path | None:
        d = self.direct_url or {}
        url = str(d.get("url", ""))
        if d.get("dir_info", {}).get("editable") and url.startswith("file://"):
            return Path(unquote(urlparse(url).path)).resolve()
        return None


def site_packages(env: Path) -> list[Path]:
    return sorted(p for p in env.glob("lib/python*/site-packages") if p.is_dir())


def installed(env: Path) -> dict[str, Dist]:
    """Every distribution in the env, from its .dist-info METADATA and direct_url.json."""
    out: dict[str, Dist] = {}
    for site in site_packages(env):
        for info in sorted(site.glob("*.dist-info")):
            try:
                meta = HeaderParser().parsestr((info / "METADATA").read_text(encoding="utf-8", errors="replace"))
            except OSError:
                continue
            name, version = meta.get("Name"), meta.get("Version")
            if not name or not version:
                continue
            direct = None
            if (info / "direct_url.json").is_file():
                try:
                    direct = json.loads((info / "direct_url.json").read_text(encoding="utf-8"))
                except (OSError, json.JSONDecodeError):
                    direct = {"url": "unreadable"}
            out[str(canonicalize_name(name))] = Dist(str(canonicalize_name(name)), version, info, direct)
    return out


def record_rows(dist: Dist) -> Iterator[tuple[str, str, str]]:
    """(path, hash, size) rows of the distribution's RECORD."""
    record = dist.info / "RECORD"
    with open(record, encoding="utf-8", newline="") as fh:
        for row in csv.reader(fh):
            if row:
                yield row[0], (row[1] if len(row) > 1 else ""), (row[2] if len(row) > 2 else "")


def record_hash(path: Path, algo: str, on_chunk: Callable[[int], None] | None = None) -> str:
    h = hashlib.new(algo)
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
            if on_chunk is not None:
                on_chunk(len(chunk))
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode("ascii")


# ----------------------------------------------------------------------------------- checks


def check_lock_file(paths: StackPaths, receipt: Mapping[str, Any]) -> list[Difference]:
    want = (receipt.get("lock") or {}).get("sha256")
    got = sha256_file(paths.pylock)
    if want and want != got:
        return [Difference("lock", str(paths.pylock), f"sha256 {want} (as the setup receipt recorded)",
                           f"sha256 {got}")]
    return []


def _fork_entries(lock: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for p in lock.get("packages", []):
        tool = (p.get("tool") or {}).get(TOOL) or {}
        if tool.get("fork") and "vcs" in p:
            out[str(tool["fork"])] = {"name": str(canonicalize_name(p["name"])), "version": p.get("version"),
                                      "commit": p["vcs"]["commit-id"], "path": tool.get("path")}
    return out


def check_forks(paths: StackPaths, lock: Mapping[str, Any], receipt: Mapping[str, Any]) -> list[Difference]:
    from october.installer.steps.fetch.worktree import dirty_entries, head_commit, submodule_states

    fetch = read_marker(paths.marker("fetch")) or {}
    recorded = (fetch.get("outputs") or {}).get("forks") or {}
    receipt_forks = {f.get("name"): f for f in receipt.get("forks") or [] if isinstance(f, dict)}
    diffs: list[Difference] = []
    for name, entry in sorted(_fork_entries(lock).items()):
        where = paths.root / str(entry.get("path") or f"src/{name}")
        what = f"fork {name} ({where})"
        head = head_commit(where)
        if head is None:
            diffs.append(Difference("forks", what, f"a git clone at {entry['commit']}", "no clone"))
            continue
        if head != entry["commit"]:
            diffs.append(Difference("forks", what, f"HEAD at {entry['commit']}", f"HEAD at {head}"))
        dirty = dirty_entries(where)
        if dirty and not (receipt_forks.get(name) or {}).get("dirty"):
            shown = "; ".join(d.strip() for d in dirty[:MAX_FILES_LISTED])
            more = f"; ... {len(dirty) - MAX_FILES_LISTED} more" if len(dirty) > MAX_FILES_LISTED else ""
            diffs.append(Difference("forks", what, "a clean tree (as set up)", f"local changes: {shown}{more}"))
        subs = (recorded.get(name) or {}).get("submodules")
        if isinstance(subs, dict) and subs:
            now = {s.path: s.commit for s in submodule_states(where)}
            for sub in sorted(set(subs) | set(now)):
                if subs.get(sub) != now.get(sub):
                    diffs.append(Difference("forks", f"{what} submodule {sub}",
                                            f"commit {subs.get(sub) or '(none)'}", f"commit {now.get(sub) or '(none)'}"))
    return diffs


def locked_versions(lock: Mapping[str, Any]) -> dict[str, str]:
    return {str(canonicalize_name(p["name"])): str(p.get("version", "")) for p in lock.get("packages", [])}


def check_distributions(paths: StackPaths, lock: Mapping[str, Any], dists: Mapping[str, Dist]) -> list[Difference]:
    want = locked_versions(lock)
    forks = {e["name"]: (fork, e) for fork, e in _fork_entries(lock).items()}
    diffs: list[Difference] = []
    for name in sorted(set(want) | set(dists)):
        d = dists.get(name)
        if d is None:
            diffs.append(Difference("distributions", name, f"{name} {want[name]} installed (locked)", "not installed"))
        elif name not in want:
            how = "editable" if d.editable_path else ("from " + str((d.direct_url or {}).get("url"))
                                                     if d.direct_url else "from an index")
            diffs.append(Difference("distributions", name, "only the locked distributions",
                                    f"{name} {d.version} installed ({how}), not in the lock"))
        elif d.version != want[name]:
            diffs.append(Difference("distributions", name, f"version {want[name]}", f"version {d.version}"))
        if d is not None and name in forks:
            fork, entry = forks[name]
            src = (paths.root / str(entry.get("path") or f"src/{fork}")).resolve()
            if d.editable_path != src:
                diffs.append(Difference("distributions", name, f"the fork {fork} installed editable from {src}",
                                        f"{d.editable_path or 'a non-editable copy'}"))
    return diffs


Bytes = Callable[[float, "float | None"], None]   # (done, total) bytes hashed, for a progress bar


def check_files(dists: Mapping[str, Dist], hashed: Bytes | None = None) -> tuple[int, list[Difference]]:
    """Every hashed RECORD entry of every distribution; -> (files checked, differences)."""
    checked = 0
    diffs: list[Difference] = []
    records: dict[str, list[tuple[str, str, str]]] = {}
    for name, d in sorted(dists.items()):
        try:
            records[name] = list(record_rows(d))
        except OSError:
            diffs.append(Difference("files", f"{name} RECORD", f"{d.info / 'RECORD'}", "no RECORD file"))
    total = float(sum(int(size) for rows in records.values() for _p, h, size in rows if h and size.isdigit()))
    done = [0.0]

    def on_chunk(n: int) -> None:
        done[0] += n
        if hashed is not None:
            hashed(done[0], total or None)

    for name, rows in records.items():
        d = dists[name]
        bad: list[str] = []
        for rel, recorded, _size in rows:
            if not recorded or "=" not in recorded:
                continue
            algo, _, value = recorded.partition("=")
            path = (d.site / rel).resolve()
            checked += 1
            try:
                got = record_hash(path, algo, on_chunk)
            except FileNotFoundError:
                bad.append(f"{rel} (missing)")
                continue
            except (OSError, ValueError) as exc:
                bad.append(f"{rel} ({exc})")
                continue
            if got != value:
                bad.append(f"{rel} (changed)")
        if bad:
            shown = ", ".join(bad[:MAX_FILES_LISTED]) + (f", ... {len(bad) - MAX_FILES_LISTED} more"
                                                         if len(bad) > MAX_FILES_LISTED else "")
            diffs.append(Difference("files", f"{name} {d.version}", "every file as its RECORD hashes it",
                                    f"{len(bad)} file(s) differ: {shown}"))
    return checked, diffs


def check_torch(lock: Mapping[str, Any], dists: Mapping[str, Dist]) -> list[Difference]:
    toolchain = ((lock.get("tool") or {}).get(TOOL) or {}).get("toolchain") or {}
    want = toolchain.get("torch")
    if not want:
        return []
    d = dists.get("torch")
    got = d.version if d is not None else None
    if got != want:
        return [Difference("torch", "torch build", f"torch {want} (the recipe's build)",
                           f"torch {got}" if got else "no torch")]
    return []


def check_wheel(paths: StackPaths, lock: Mapping[str, Any]) -> list[Difference]:
    wheel = ((lock.get("tool") or {}).get(TOOL) or {}).get("wheel") or {}
    if not wheel.get("sha256") or not wheel.get("filename"):
        return []
    path = paths.wheels / str(wheel["filename"])
    if not path.is_file():
        return [Difference("wheel", str(path), f"the base wheel with sha256 {wheel['sha256']}", "no such file")]
    got = sha256_file(path)
    if got != wheel["sha256"]:
        return [Difference("wheel", str(path), f"sha256 {wheel['sha256']}", f"sha256 {got}")]
    return []


def _jit_paths(paths: StackPaths) -> dict[str, Path]:
    marker = read_marker(paths.marker("jit")) or {}
    return {str(m["uri"]): Path(str(m["path"])) for m in (marker.get("outputs") or {}).get("modules", [])
            if isinstance(m, dict) and m.get("uri") and m.get("path")}


def check_jit(paths: StackPaths, lock: Mapping[str, Any]) -> tuple[int, list[Difference]]:
    modules = ((lock.get("tool") or {}).get(TOOL) or {}).get("jit") or []
    known = _jit_paths(paths)
    diffs: list[Difference] = []
    for m in modules:
        uri, want = str(m.get("uri")), str(m.get("sha256"))
        path = known.get(uri) or next(iter(sorted(paths.jit.rglob(f"{uri}.so"))), None)
        if path is None or not path.is_file():
            diffs.append(Difference("jit", uri, f"the built library {uri}.so under {paths.jit}", "no such file"))
            continue
        got = sha256_file(path)
        if got != want:
            diffs.append(Difference("jit", f"{uri} ({path})", f"sha256 {want}", f"sha256 {got}"))
    return len(modules), diffs


# ------------------------------------------------------------------------------------ entry


def read_stack_records(paths: StackPaths) -> tuple[dict[str, Any], dict[str, Any]]:
    """(setup receipt, lock) of a finished stack; a StateError naming what to run when absent."""
    if not paths.pylock.is_file() or not paths.setup_receipt.is_file():
        missing = [str(p) for p in (paths.pylock, paths.setup_receipt) if not p.is_file()]
        raise StateError(f"{paths.root} is not a finished october stack",
                         expected="STACK/pylock.toml and STACK/receipts/setup.json (written by the last steps)",
                         found=f"no {', '.join(missing)}",
                         fix=f"run `october_setup {paths.root} --recipe NAME` to finish it, or point --install "
                             "at the stack directory")
    try:
        receipt = json.loads(paths.setup_receipt.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StateError("the stack's setup receipt is unreadable", expected=f"JSON in {paths.setup_receipt}",
                         found=str(exc), fix=f"re-run `october_setup {paths.root}` to rewrite it") from None
    lock = receipt.get("lock") if isinstance(receipt, dict) else None
    if not isinstance(receipt, dict) or not isinstance(lock, (dict, type(None))) \
            or not isinstance((lock or {}).get("sha256"), (str, type(None))) \
            or not isinstance(receipt.get("forks"), (list, type(None))):
        raise StateError("the stack's setup receipt is malformed",
                         expected=f"a JSON object in {paths.setup_receipt} with lock.sha256 (a string) and forks (a list)",
                         found=json.dumps(receipt)[:200], fix=f"re-run `october_setup {paths.root}` to rewrite it")
    return receipt, read_lock(paths.pylock)


def verify_stack(stack: Path, progress: Callable[[str], None] | None = None,
                 hashed: Bytes | None = None) -> VerifyReport:
    paths = StackPaths(stack.resolve())
    receipt, lock = read_stack_records(paths)
    dists = installed(paths.env)
    say = progress or (lambda _msg: None)
    diffs: list[Difference] = []
    say("lock file")
    diffs += check_lock_file(paths, receipt)
    say("fork clones")
    forks = check_forks(paths, lock, receipt)
    diffs += forks
    say("distributions")
    diffs += check_distributions(paths, lock, dists)
    files, file_diffs = check_files(dists, hashed)
    diffs += file_diffs
    diffs += check_torch(lock, dists)
    say("base wheel")
    diffs += check_wheel(paths, lock)
    say("JIT libraries")
    jit_count, jit_diffs = check_jit(paths, lock)
    diffs += jit_diffs
    checked = {"forks": len(_fork_entries(lock)), "distributions": len(dists), "files": files,
               "jit": jit_count, "wheel": int(bool(((lock.get("tool") or {}).get(TOOL) or {}).get("wheel")))}
    return VerifyReport(stack=paths.root, lock_sha256=sha256_file(paths.pylock), checked=checked,
                        differences=tuple(diffs))


def format_report(report: VerifyReport) -> Sequence[str]:
    c = report.checked
    lines = [f"checked {c['forks']} fork(s), {c['distributions']} distribution(s), {c['files']} file(s), "
             f"{c['jit']} JIT librar{'y' if c['jit'] == 1 else 'ies'}, {c['wheel']} base wheel"]
    if report.ok:
        lines.append(f"stack {report.stack} matches its lock (sha256 {report.lock_sha256[:12]})")
    return lines
