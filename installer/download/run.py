"""``current download``: fetch the selected model at its pinned revision, verify it, write the manifest.

Online: the hub's listing at the pin (its resolved commit must be the pin), ``snapshot_download``, every file
checked (recipe sha256 > hub LFS sha256 > git blob id), a record of the verified hashes in
``<local_dir>/.october/verified.json``, the calibrated scales, the manifest.  ``--offline`` re-verifies the local
copy against that record instead.  ``--model-dir DIR`` checks a copy already there, in place, against the
recipe's sha256 pins alone (the only record the copy did not produce itself).
"""

from __future__ import annotations

import json
import shlex
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Callable, Iterator

from ..core import jsonread
from ..core.atomic import write_text_atomic
from ..core.errors import DownloadBusyError, DownloadError, UsageError
from . import hub
from .copycheck import OWN_DIR, extras, local_files, named, refuse_extras, set_aside
from .manifest import build_manifest, write_manifest
from .plan import DownloadOptions, DownloadPlan, make_plan
from .record import RECORD_KIND, record_entry, record_path, uncovered_patterns, write_record
from .scales import check_scales
from .verify import Expected, VerifiedFile, verify_files

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt")
LOCAL_ENDPOINT = "local directory (--model-dir)"
CACHEDIR_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
                "# This file is a cache directory tag created by october.\n"
                "# For information about cache directory tags see https://bford.info/cachedir/\n")


def _printer(quiet: bool) -> tuple[Callable[[str], None], Callable[[str], None]]:
    def say(msg: str) -> None:
        if not quiet:
            print(hub.clean(msg), file=sys.stderr, flush=True)

    def warn(msg: str) -> None:
        print("warning: " + hub.clean(msg), file=sys.stderr, flush=True)

    return say, warn


Bars = Callable[[str, float, "float | None"], None]   # (label, done, total bytes): a progress bar


def _bar(bars: Bars | None, label: str) -> Callable[[float, float | None], None] | None:
    if bars is None:
        return None
    return lambda done, total: bars(label, done, total)


def _verify_hub_copy(plan: DownloadPlan, expected: list[Expected], say: Callable[[str], None],
                     bars: Bars | None) -> list[VerifiedFile]:
    """The copy checked (a bad file moved aside and its download record dropped, so a re-run fetches it)."""
    fix = ("run the download again without --offline to fetch the bad file(s) from the hub (they were moved "
           "aside)") if plan.offline else None

    def bad(path: str) -> None:
        hub.forget_file(plan.local_dir, path)
        if not plan.offline:        # it may have been copied from the user's HF cache: the next run downloads
            write_text_atomic(_no_user_cache(plan), "a file of this copy failed its sha256: huggingface_hub's "
                              "own cache is not read for it again\n")

    return verify_files(plan.local_dir, expected, where=plan.where, on_bad=bad, progress=say,
                        hashed=_bar(bars, "sha256"), fix=fix)


def _no_user_cache(plan: DownloadPlan) -> Path:
    return plan.local_dir / OWN_DIR / "no-user-hf-cache"


def _no_weight(plan: DownloadPlan, where: str, found: str) -> DownloadError:
    return DownloadError(f"the selection of {where} contains no weight file",
                         expected=f"at least one of {', '.join('*' + s for s in WEIGHT_SUFFIXES)}",
                         found=found, fix=f"add the weight patterns to [models.{plan.selection}].patterns")


def run_download(opts: DownloadOptions, bars: Bars | None = None) -> Path:
    """Download (or with ``offline`` re-verify) the selection and write its manifest; return its path.
    ``bars(label, done, total)`` shows the bytes written and hashed (the CLI's ConsoleReporter)."""
    plan = make_plan(opts)
    if not plan.offline:
        hub.endpoint()          # a malformed HF_ENDPOINT is a usage error before anything starts
    say, warn = _printer(plan.quiet)
    if plan.offline and not plan.local_dir.is_dir():
        raise DownloadError(f"--offline: no local copy of {plan.where}",
                            expected=f"a directory {plan.local_dir} from an earlier download",
                            found="nothing there", fix="run the download once without --offline "
                            "(or pass --local-dir where the copy is)")
    check_writable(plan)
    check_output_apart(plan)
    if not plan.local_source and not plan.offline:
        check_owned(plan)
    with nullcontext() if plan.local_source else _dir_lock(plan):     # a --model-dir copy is only read
        legacy = False      # an earlier version's record: it names no patterns (read once, by the re-verification)
        if plan.local_source:
            say(f"checking {plan.where} in {plan.local_dir} against the recipe's pins (no hub)")
            resolved, files = plan.revision, _verify_local(plan, say, bars)
        elif plan.offline:
            say(f"re-verifying {plan.where} in {plan.local_dir} (offline)")
            resolved, files, legacy = _reverify_offline(plan, say, bars)
        else:
            resolved, files = _download_online(plan, say, bars)
        if not plan.local_source:
            # an earlier version's record (no patterns) passed only by its files: it shows no patterns complete,
            # and a record naming the recipe's would vouch for them at every later --offline run (the upgrade hunt)
            write_record(plan, files, patterns=not (plan.offline and legacy))
        scales = check_scales(plan, warn)
        manifest = build_manifest(plan, resolved_revision=resolved, files=files, scales=scales,
                                  endpoint=LOCAL_ENDPOINT if plan.local_source else hub.shown_endpoint())
        write_manifest(plan.output, manifest, secrets=hub.secrets())
    say(f"wrote {plan.output} ({len(files)} files verified, {sum(f.size for f in files)} bytes)")
    return plan.output


def check_writable(plan: DownloadPlan) -> None:
    """Every directory the run writes to can be written, checked before the hub is asked or a byte is fetched
    (exit 19 naming the option and its path; not after the whole model was downloaded and hashed): the
    manifest's directory (``--output``) and, unless ``--model-dir`` (only read), the model directory, which
    holds the download lock (``--local-dir``, or the default under ``--cache-dir``)."""
    from ..core.cliargs import require_writable

    require_writable("--output", plan.output.parent, what="the manifest's directory (--output)")
    if plan.local_source:
        return
    option = "--cache-dir" if plan.default_local_dir else "--local-dir"
    what = "the model directory under the cache (--cache-dir)" if plan.default_local_dir else \
        "the model directory (--local-dir)"
    require_writable(option, plan.local_dir, what=what)


def check_output_apart(plan: DownloadPlan) -> None:
    """The manifest is written after the files were verified: one named like a file of the copy (``--output
    DIR/config.json``), or any file in a ``--model-dir`` (nothing is written there), would replace it."""
    out, root = plan.output.resolve(), plan.local_dir.resolve()
    if not out.is_relative_to(root):
        return
    rel = out.relative_to(root).as_posix()
    if plan.local_source or rel.split("/")[0] in (OWN_DIR, ".cache") or hub.select([rel], plan.patterns):
        raise UsageError(f"--output {plan.output} would be written over a file of the model copy",
                         expected="a manifest path outside the model directory (or beside its files under a name "
                                  "the selection's patterns do not match)", found=f"'{rel}' in {root}",
                         fix="pass --output DIR (the manifest becomes DIR/<format>-download.json) outside the copy")


HUB_DOWNLOADS = Path(".cache") / "huggingface" / "download"   # huggingface_hub's own record in a local_dir
NOT_CONTENT = frozenset({"lost+found", ".DS_Store"})            # a fresh mount point, a Mac's folder view


def check_owned(plan: DownloadPlan) -> None:
    """A ``--local-dir`` must be new, empty, or a download's (``.october/``: this tool's, an earlier version's
    unfinished one included; ``.cache/huggingface/download/``: ``hf download``'s): the download writes the hub's
    files over whatever is there, a user's own ``config.json`` included."""
    d = plan.local_dir
    if plan.default_local_dir or not d.is_dir() or (d / OWN_DIR).is_dir() or (d / HUB_DOWNLOADS).is_dir():
        return
    theirs = sorted(p.name for p in d.iterdir() if p.name not in NOT_CONTENT)
    if theirs:
        raise DownloadError(f"--local-dir {d} holds files no download made",
                            expected=f"a new or empty directory, or one a download made (it holds {OWN_DIR}/ or "
                                     f"{HUB_DOWNLOADS}/)",
                            found=f"{len(theirs)} entr{'y' if len(theirs) == 1 else 'ies'}: {named(theirs)}",
                            fix="pass a new --local-dir (nothing was changed there); if it is a download of this "
                                f"model you want finished and checked, `mkdir {shlex.quote(str(d / OWN_DIR))}` "
                                "adopts it (its files are then verified, and replaced where they differ); to check "
                                "a copy of yours in place, pass it as --model-dir")


def _download_online(plan: DownloadPlan, say: Callable[[str], None], bars: Bars | None = None
                     ) -> tuple[str, list[VerifiedFile]]:
    say(f"asking {hub.shown_endpoint()} for {plan.where}")
    snap = hub.fetch_snapshot_info(plan.repo, plan.revision, plan.patterns)
    if snap.resolved_revision != plan.revision:
        raise DownloadError(f"the hub resolved {plan.repo} to another revision than the pinned one",
                            expected=plan.revision, found=snap.resolved_revision or "no revision",
                            fix="check HF_ENDPOINT (a mirror may be stale) and the recipe's revision")
    if not snap.files:
        raise DownloadError(f"no file of {plan.where} matches the recipe's patterns",
                            expected=f"files matching {list(plan.patterns)}", found="none",
                            fix=f"fix [models.{plan.selection}].patterns in {plan.recipe_path}")
    expected = _expected_from_hub(plan, snap)
    _unlisted(plan, {e.path for e in expected}, f"{plan.where} (the hub's listing)", say)

    plan.local_dir.mkdir(parents=True, exist_ok=True)
    tag = plan.cache_dir / "models" / "CACHEDIR.TAG"
    if plan.default_local_dir and not tag.exists():
        write_text_atomic(tag, CACHEDIR_TAG)
    if dropped := hub.drop_partials(plan.local_dir):
        say(f"removed {dropped} partial file(s) a stopped download left (huggingface_hub fetches them anew)")
    say(f"downloading {len(snap.files)} files into {plan.local_dir}")
    sizes = [f.size for f in snap.files]
    hub.download_snapshot(plan.repo, plan.revision, plan.patterns, plan.local_dir, quiet=plan.quiet,
                          report=_bar(bars, "model files"),
                          total=float(sum(sizes)) if None not in sizes else None,   # one total, from the listing
                          user_cache=not _no_user_cache(plan).exists())

    commits = hub.recorded_commits(plan.local_dir, [f.path for f in snap.files])
    wrong = {p: c for p, c in commits.items() if c != plan.revision}
    if wrong:
        p, c = sorted(wrong.items())[0]
        raise DownloadError(f"'{p}' was served from another commit than the pinned one "
                            f"({len(wrong)} file(s) affected)",
                            expected=plan.revision, found=c or "no recorded commit",
                            fix="re-run; if it repeats, check HF_ENDPOINT (a proxy or mirror may rewrite revisions)")

    say("verifying sha256 of every file")
    return snap.resolved_revision, _verify_hub_copy(plan, expected, say, bars)


def _is_weight(path: str) -> bool:
    return path.endswith(WEIGHT_SUFFIXES)


def _expected_from_hub(plan: DownloadPlan, snap: hub.HubSnapshot) -> list[Expected]:
    listed = {f.path for f in snap.files}
    stray = sorted(set(plan.pinned_sha256) - listed)
    if stray:
        raise DownloadError(f"the recipe pins a sha256 for '{stray[0]}', which {plan.where} does not "
                            "provide under the selection's patterns",
                            expected=f"one of {sorted(listed)}", found=repr(stray[0]),
                            fix=f"fix [models.{plan.selection}.sha256] or the patterns in {plan.recipe_path}")
    out: list[Expected] = []
    for f in snap.files:
        pinned = plan.pinned_sha256.get(f.path)
        if pinned is not None:
            out.append(Expected(f.path, f.size, pinned, f.blob_id, source="recipe", record=f.lfs_sha256))
        elif f.lfs_sha256 is not None:
            out.append(Expected(f.path, f.size, f.lfs_sha256, f.blob_id, source="hub-lfs"))
        elif _is_weight(f.path):
            raise DownloadError(f"weight file '{f.path}' of {plan.where} has no sha256 on record",
                                expected="an LFS sha256 from the hub or a sha256 pinned in the recipe",
                                found="a plain git file without LFS metadata",
                                fix=f"pin its sha256 under [models.{plan.selection}.sha256] in {plan.recipe_path}")
        else:
            out.append(Expected(f.path, f.size, None, f.blob_id, source="hub-git-blob"))
    if not any(_is_weight(e.path) for e in out):
        raise _no_weight(plan, plan.where, ", ".join(sorted(listed)))
    return out


def _verify_local(plan: DownloadPlan, say: Callable[[str], None], bars: Bars | None = None) -> list[VerifiedFile]:
    where = f"{plan.where} in {plan.local_dir}"
    table = f"[models.{plan.selection}.sha256] of {plan.recipe_path}"
    present = local_files(plan.local_dir)
    wanted = hub.select(present, plan.patterns)
    if not wanted:
        raise DownloadError(f"no file in {plan.local_dir} matches the recipe's patterns",
                            expected=f"files matching {list(plan.patterns)}", found=", ".join(present[:8]) or "none",
                            fix="pass the model's own directory to --model-dir")
    if not any(_is_weight(p) for p in wanted):
        raise _no_weight(plan, where, ", ".join(wanted[:8]))
    unpinned = [p for p in wanted if p not in plan.pinned_sha256]
    if unpinned:
        raise DownloadError(f"{len(unpinned)} file(s) of the local copy have no sha256 pinned in the recipe "
                            f"(first: '{unpinned[0]}')",
                            expected=f"a pin for every selected file in {table}",
                            found=f"none for {', '.join(unpinned[:4])}{' ...' if len(unpinned) > 4 else ''}",
                            fix=f"pin them from a copy you trust (sha256sum of each file) under {table}; "
                                "a local copy is never trusted by its own hashes")
    stray = sorted(set(plan.pinned_sha256) - set(wanted))
    if stray:
        raise DownloadError(f"the recipe pins a sha256 for '{stray[0]}', which {plan.local_dir} does not hold "
                            "under the selection's patterns", expected=f"one of {wanted[:8]}", found=repr(stray[0]),
                            fix="pass the complete copy to --model-dir, or fix the pins in the recipe")
    expected = [Expected(p, None, plan.pinned_sha256[p], None, source="recipe") for p in wanted]
    return verify_files(plan.local_dir, expected, where=where, progress=say, hashed=_bar(bars, "sha256"),
                        move_bad=False, fix=f"the copy in {plan.local_dir} is not the pinned model: restore it "
                        "from a copy you trust (nothing was moved or changed)")


def _unlisted(plan: DownloadPlan, listed: set[str], where: str, say: Callable[[str], None]) -> None:
    """Nothing but ``listed`` in the folder downloaded into: in the cache's own folder (shared by recipes that
    pin one revision with other patterns) the rest is set aside; in a --local-dir it is refused."""
    if plan.default_local_dir and plan.local_dir.is_dir():
        found = extras(plan.local_dir, None, listed, plan.output)
        if found:
            aside = set_aside(plan.local_dir, found)
            say(f"set aside {len(found)} file(s) the pin of this selection does not list (another selection's "
                f"download left them) in {aside}: {named(found)}")
        return
    refuse_extras(plan.local_dir, None, listed, where=where, manifest=plan.output)


def _reverify_offline(plan: DownloadPlan, say: Callable[[str], None], bars: Bars | None = None
                      ) -> tuple[str, list[VerifiedFile], bool]:
    """The copy re-verified against its record of verified hashes -> (revision, files, whether the record is an
    earlier version's: it names no patterns)."""
    rec_path = record_path(plan)
    fix = "run the download once without --offline to record the hub's hashes for this copy"
    try:
        rec = jsonread.loads(rec_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DownloadError(f"--offline: {plan.local_dir} has no record of verified hashes",
                            expected=f"{rec_path} written by an earlier online download",
                            found="nothing", fix=fix) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DownloadError(f"--offline: the record {rec_path} is unreadable", expected="JSON",
                            found=str(exc), fix=fix) from None
    ok = isinstance(rec, dict) and rec.get("kind") == RECORD_KIND and isinstance(rec.get("files"), list)
    bad = next((f for f in rec["files"] if not record_entry(f)), None) if ok else None
    if not ok or bad is not None:
        raise DownloadError(f"--offline: the record {rec_path} is malformed",
                            expected=f"kind={RECORD_KIND!r} with a file list, each a path inside the copy, its size "
                                     "and a 64-hex sha256",
                            found=f"the entry {json.dumps(bad)[:200]}" if bad is not None else "something else",
                            fix=fix)
    if (rec.get("repo"), rec.get("revision")) != (plan.repo, plan.revision):
        raise DownloadError(f"--offline: {plan.local_dir} holds another model or revision",
                            expected=plan.where, found=f"{rec.get('repo')}@{rec.get('revision')}",
                            fix="pass --local-dir of the right copy, or download without --offline")
    by_path = {f["path"]: f for f in rec["files"]}
    uncovered = uncovered_patterns(plan.patterns, rec.get("patterns"), set(by_path))
    if uncovered:
        raise DownloadError(f"--offline: the record {rec_path} was written for other patterns than "
                            f"[models.{plan.selection}].patterns (another recipe's download of this revision, or "
                            "an earlier version's record without the file)", expected=str(list(plan.patterns)),
                            found=f"{', '.join(uncovered)} not covered by the recorded "
                                  + str(rec.get("patterns", "files (no patterns recorded)")),
                            fix="download without --offline once where the hub can be reached (a file the recipe names "
                                "may simply not be in the repository at this revision: an earlier version's record "
                                "cannot tell), or pass --local-dir of a copy this recipe downloaded")
    wanted = hub.select(list(by_path), plan.patterns)
    if not wanted:
        raise DownloadError(f"--offline: no recorded file of {plan.where} matches the recipe's patterns",
                            expected=f"files matching {list(plan.patterns)}", found=", ".join(sorted(by_path)),
                            fix="download without --offline")
    stray = sorted(set(plan.pinned_sha256) - set(wanted))
    if stray:
        raise DownloadError(f"--offline: the recipe pins a sha256 for '{stray[0]}', which the local copy lacks",
                            expected=f"one of {wanted}", found=repr(stray[0]), fix="download without --offline")
    _unlisted(plan, set(wanted), f"the record {rec_path}", say)
    expected = [Expected(p, by_path[p]["size"], plan.pinned_sha256.get(p) or by_path[p]["sha256"], None,
                         source="recipe" if plan.pinned_sha256.get(p) else "record", record=by_path[p]["sha256"])
                for p in wanted]
    return plan.revision, _verify_hub_copy(plan, expected, say, bars), "patterns" not in rec


@contextmanager
def _dir_lock(plan: DownloadPlan) -> Iterator[None]:
    from filelock import FileLock, Timeout

    lock_path = plan.local_dir / OWN_DIR / "download.lock"     # inside: the folder given is the one written
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_path), timeout=0)
    try:
        lock.acquire()
    except Timeout:        # busy: exit 5, as for a stack or GPU another run holds
        raise DownloadBusyError(f"another download into {plan.local_dir} is running",
                                expected="no concurrent download of the same directory",
                                found=f"the lock {lock_path} is held",
                                fix="wait for the other run to finish (or pass another --local-dir)") from None
    try:
        yield
    finally:
        lock.release()
