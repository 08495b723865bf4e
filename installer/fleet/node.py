"""What runs on one node (in its pinned Ray task, no Ray import here): receive a shipped kit and lock,
verified; run october_setup and current smoke as children; report the node's record for the fleet receipt."""

from __future__ import annotations

import shutil
import socket
import sys
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..core import jsonread
from ..core.atomic import write_bytes_atomic
from ..core.cachekey import KEY_ENV
from ..core.errors import CommandFailed, KitError, OctoberError, ReceiptError
from ..core.hashing import sha256_bytes, sha256_file
from ..core.redact import env_secrets, redact
from ..core.runner import Completed, Runner
from .plan import NodeJob
from .progress import RECEIVING, RECHECK, SMOKE, setup_phase
from ..kit import MANIFEST
from ..kit.manifest import check_files, listed, read_manifest

CHUNK = 8 << 20          # bytes per object-store chunk of a shipped kit file


@dataclass(frozen=True)
class ShippedFile:
    rel: str
    sha256: str
    size: int
    chunks: tuple[Any, ...]          # object refs; ``fetch`` turns one into bytes


@dataclass(frozen=True)
class Shipment:
    manifest: bytes
    files: tuple[ShippedFile, ...]
    lock: bytes | None
    lock_sha256: str | None


def receive_kit(dest: Path, shipment: Shipment, fetch: Callable[[Any], bytes]) -> int:
    """Write the shipped kit to ``dest`` (files already there with the right sha256 are kept), then
    verify the whole directory against its manifest; return the bytes received.  Nodes that share a
    machine (and so this path) take turns: one's temporary files are not another's extra files."""
    from filelock import FileLock

    dest.parent.mkdir(parents=True, exist_ok=True)
    got = 0
    with FileLock(str(dest) + ".lock"):
        for f in shipment.files:
            p = dest / f.rel
            if p.is_file() and p.stat().st_size == f.size and sha256_file(p) == f.sha256:
                continue
            data = b"".join(fetch(c) for c in f.chunks)
            got += len(data)
            if sha256_bytes(data) != f.sha256:
                raise KitError(f"the kit file {f.rel} arrived damaged on {socket.gethostname()}",
                               expected=f"sha256 {f.sha256}", found=f"sha256 {sha256_bytes(data)}",
                               fix="re-run the fleet command (finished nodes are kept)")
            p.parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(p, data)
        write_bytes_atomic(dest / MANIFEST, shipment.manifest)
        problems = check_files(dest, read_manifest(dest))
        if problems:
            raise KitError(f"the shipped kit at {dest} does not match its manifest: {listed(problems)}",
                           expected="every file as kit.json records it", found="the differences listed",
                           fix=f"remove {dest} on that node and re-run the fleet command")
    return got


def blank_record(job: NodeJob, status: str, detail: str | None, host: str | None = None) -> dict[str, Any]:
    """A node record without facts (``seconds`` is set when the node's task ends)."""
    return {"name": job.name, "node_id": job.node_id, "host": job.host if host is None else host,
            "resumed": job.setup_argv is None, "status": status, "detail": detail, "stack": job.stack, "gpu": None,
            "arch": None, "lock_sha256": None, "jit": [], "kit_received_bytes": None, "setup": None, "smoke": None,
            "seconds": None}


def _gpu(runner: Runner) -> tuple[dict[str, Any] | None, str | None]:
    """GPU name, count and driver, and the first GPU's arch, from nvidia-smi (None without one)."""
    if shutil.which("nvidia-smi") is None:
        return None, None
    done = runner.run(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"],
                      step="fleet-gpu", check=False, timeout=60)
    rows = [[c.strip() for c in line.split(",")] for line in done.output.splitlines() if line.count(",") >= 2]
    if done.returncode != 0 or not rows:
        return None, None
    return {"name": rows[0][0], "count": len(rows), "driver": rows[0][1]}, rows[0][2]


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = jsonread.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _tail(text: str, n: int = 4) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-n:])[-600:]


def run_job(job: NodeJob, shipment: Shipment | None, fetch: Callable[[Any], bytes],
            python: str = sys.executable, report: Callable[[str], None] = lambda _phase: None,
            cache_key: bytes | None = None) -> dict[str, Any]:
    """Run the job on this node; return its node record (status, facts, times).  ``report`` hears each
    phase as it begins (see :mod:`october.installer.fleet.progress`); ``cache_key``: the driver's key for the
    cache the nodes share (its entries are signed with it: :mod:`october.installer.core.cachekey`), given to the
    node's commands in their environment, so that a node whose home holds another key takes the seed's JIT."""
    from ..engine import STEP_ORDER

    start = time.monotonic()
    stack = Path(job.stack)

    def echo(line: str) -> None:
        if (phase := setup_phase(line, STEP_ORDER)) is not None:
            with suppress(Exception):       # progress is a courtesy: it never fails a node's install
                report(phase)

    runner = Runner(Path(f"{job.stack}.fleet-logs"), echo=echo,
                    secrets=(cache_key.hex(),) if cache_key is not None else ())
    keyed = {KEY_ENV: cache_key.hex()} if cache_key is not None else None
    rec = blank_record(job, "error", None, host=socket.gethostname())
    try:
        rec["gpu"], rec["arch"] = _gpu(runner)
        _receive(job, shipment, fetch, report, rec)
        if job.setup_argv is None:
            report(RECHECK)
            if job.verify_argv is not None:      # finished before: is the stack still what it was?
                done = _command(runner, rec, "fleet-verify", "current verify", python, job.verify_argv, job, start, keyed)
                if done is None or done.returncode != 0:
                    if done is not None:
                        rec["detail"] = (f"finished by the previous fleet run, its stack no longer verifies "
                                         f"({rec['detail']}); re-run the fleet command: this node is installed "
                                         "again (or repair it as `current verify` says)")
                    return _facts(rec, stack)
        else:
            done = _command(runner, rec, "fleet-setup", "october_setup", python, job.setup_argv, job, start, keyed)
            rec["setup"] = None if done is None else {"exit_code": done.returncode, "seconds": round(done.seconds, 3)}
            if done is None or done.returncode != 0:
                return _facts(rec, stack)
        _facts(rec, stack)
        wrong = receipt = None
        if job.smoke_argv is None and job.smoke_receipt is not None:     # a finished node: its receipt is re-read
            receipt = _read_json(Path(job.smoke_receipt))
            wrong = _foreign_receipt(receipt, rec["lock_sha256"], str(stack / "receipts" / "setup.json"))
        # one not believed (another version's checks, other JIT modules) of a stack that verified: smoked again
        smoke_argv = job.smoke_argv or (job.smoke_again_argv if wrong else None)
        if smoke_argv is not None:
            report(SMOKE)
            done = _command(runner, rec, "fleet-smoke", "current smoke", python, smoke_argv, job, start, keyed)
            if done is None:
                return rec
            receipt = _read_json(Path(job.smoke_receipt)) if job.smoke_receipt else None
            rec["smoke"] = _smoke_fact(receipt, done.returncode, done.seconds)
            if done.returncode == 0 and not rec["smoke"]["passed"]:
                rec["status"] = "failed"
                rec["detail"] = f"current smoke exit 0 but its receipt {job.smoke_receipt} does not say passed"
            if rec["status"] == "failed":
                return rec
            rec["status"] = "passed"
            if wrong:
                rec["detail"] = f"smoked again: its earlier smoke receipt was not believed ({wrong})"
        elif job.smoke_receipt is not None:
            rec["smoke"] = _smoke_fact(None if wrong else receipt, 0 if receipt and receipt.get("passed") else 1, None)
            rec["status"] = "passed" if rec["smoke"]["passed"] else "failed"
            if wrong:
                rec["detail"] = (f"its smoke receipt {job.smoke_receipt} is not believed: {wrong}; re-run the fleet "
                                 "command with its smoke to write a fresh one")
            elif not rec["smoke"]["passed"]:
                rec["detail"] = f"its smoke receipt {job.smoke_receipt} no longer says passed"
        else:
            rec["status"] = "installed"
        if rec["lock_sha256"] is None and rec["status"] in ("passed", "installed"):
            rec["status"], rec["detail"] = "failed", f"no lock at {stack / 'pylock.toml'}"
        return rec
    except OctoberError as exc:
        rec["status"], rec["detail"] = "error", redact(exc.message, env_secrets())
        return rec
    finally:
        rec["seconds"] = round(time.monotonic() - start, 3)


def _receive(job: NodeJob, shipment: Shipment | None, fetch: Callable[[Any], bytes], report: Callable[[str], None],
             rec: dict[str, Any]) -> None:
    """What the driver shipped, put in place on this node: the kit (for a node that sets up; its bytes counted in
    ``rec``) and the lock, each checked by its sha256."""
    if shipment is not None and job.setup_argv is not None:
        if shipment.files:
            report(RECEIVING)
        rec["kit_received_bytes"] = receive_kit(Path(job.kit_dir), shipment, fetch)
    if job.lock_path is not None and shipment is not None and shipment.lock is not None:
        if sha256_bytes(shipment.lock) != shipment.lock_sha256:
            raise KitError("the lock arrived damaged", expected=f"sha256 {shipment.lock_sha256}",
                           found=f"sha256 {sha256_bytes(shipment.lock)}", fix="re-run the fleet command")
        Path(job.lock_path).parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(Path(job.lock_path), shipment.lock)


def _command(runner: Runner, rec: dict[str, Any], step: str, what: str, python: str, argv: Sequence[str],
             job: NodeJob, start: float, extra_env: dict[str, str] | None = None) -> Completed | None:
    """Run one of the node's two commands in what is left of its time, through :mod:`.child` (so it dies with
    this task's worker).  None when the time ran out and it was killed (``rec`` says ``timeout``); a non-zero
    exit sets ``rec`` to ``failed`` with the output's last lines."""
    left = job.timeout_s - (time.monotonic() - start)
    done: Completed | None = None
    if left > 0:
        try:
            done = runner.run([python, "-m", "october.installer.fleet.child", *argv], step=step, check=False,
                              timeout=left, extra_env=extra_env)
        except CommandFailed:             # Runner raises this only for a command it killed on timeout
            done = None
    log = runner.log_path(step)
    if done is None:
        rec["status"], rec["detail"] = "timeout", (f"{what} killed after the node's {job.timeout_s:.0f} s "
                                                   f"(log: {log}); re-run to resume")
    elif done.returncode != 0:
        rec["status"], rec["detail"] = "failed", f"{what} exit {done.returncode}: {_tail(done.output)} (log: {log})"
    return done


def _foreign_receipt(receipt: dict[str, Any] | None, lock_sha256: str | None,
                     setup_receipt: str | None = None) -> str | None:
    """Why a re-read smoke receipt says nothing about this node's stack as it is now (None: it does): it
    must be one `current smoke` writes (receipts/smoke.schema.json), name the lock the stack has, and be
    this stack's (its setup receipt's path: every node has the same lock)."""
    if receipt is None:
        return "it is missing or not JSON"
    from ..core.schemas import validate      # jsonschema: only for a re-read receipt
    try:
        validate("smoke", receipt)
    except ReceiptError as exc:
        return f"{exc.what}: {exc.found}" if exc.found else exc.what
    stack = receipt.get("stack") if isinstance(receipt.get("stack"), dict) else {}
    if stack.get("lock_sha256") != lock_sha256:
        return f"it names lock sha256 {stack.get('lock_sha256')}, the stack's lock is sha256 {lock_sha256}"
    theirs = stack.get("setup_receipt")
    if setup_receipt is not None and (not isinstance(theirs, str) or Path(theirs).resolve() != Path(setup_receipt).resolve()):
        return f"it is the smoke of the stack whose setup receipt is {stack.get('setup_receipt')}, not {setup_receipt}"
    from ..pyenv.builtkey import tool_code

    if stack.get("tool_code") != (ours := tool_code()):   # another version's checks: not the ones this one runs
        return (f"it was written by other code of the tool ({stack.get('tool_code') or 'an earlier version'}), not "
                f"this install's ({ours[:12]}), whose checks may differ")
    if setup_receipt is not None:       # the JIT modules it loaded are the ones the stack has now (a re-run rebuilt)
        now = _jit_modules((_read_json(Path(setup_receipt)) or {}).get("jit"))
        if _jit_modules(stack.get("jit")) != now:
            return f"it smoked other JIT modules than the {len(now)} the stack's setup receipt lists now"
    return None


def _jit_modules(listed: Any) -> set[tuple[str, str]]:
    return {(str(m.get("uri")), str(m.get("sha256"))) for m in listed or [] if isinstance(m, dict)}


def _smoke_fact(receipt: dict[str, Any] | None, rc: int, seconds: float | None) -> dict[str, Any]:
    passed = bool(receipt and receipt.get("passed") is True and rc == 0)
    doc = receipt or {}
    machine = doc.get("machine") if isinstance(doc.get("machine"), dict) else {}
    return {"passed": passed, "exit_code": rc, "level": doc.get("level"),
            "seconds": round(seconds, 3) if seconds is not None else None,
            "reasons": [str(r) for r in doc.get("reasons", [])][:8],
            "proves": doc.get("proves"), "device": machine.get("device"),
            "checks": {str(c.get("name")): str(c.get("status")) for c in doc.get("checks") or [] if isinstance(c, dict)}}


def _facts(rec: dict[str, Any], stack: Path) -> dict[str, Any]:
    """Lock sha256 (of the stack's own pylock.toml) and JIT module hashes (the setup receipt's)."""
    lock = stack / "pylock.toml"
    rec["lock_sha256"] = sha256_file(lock) if lock.is_file() else None
    setup = _read_json(stack / "receipts" / "setup.json") or {}
    rec["jit"] = [{"uri": str(m["uri"]), "sha256": str(m["sha256"])} for m in setup.get("jit") or []
                  if isinstance(m, dict) and m.get("uri") and m.get("sha256")]
    return rec


