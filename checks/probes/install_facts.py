"""Post-install facts, read *inside the stack env* (run as ``STACK/env/bin/python -I checks/probes/install_facts.py JSON``).

Standard library only.  Prints one line ``OCTOBER_PROBE {json}``; decides nothing
(``october.installer.install.guards`` judges the facts).  The JSON argument names the
torch distribution, each fork's import name and checkout, the modules to import
when CUDA libraries exist, and which libraries count as "CUDA exists".
"""

import csv
import ctypes
import glob
import importlib
import importlib.metadata as md
import importlib.util
import json
import os
import platform
import posixpath
import sys
import traceback

MARK = "OCTOBER_PROBE "


def _direct_url(dist):
    try:
        text = dist.read_text("direct_url.json")
    except Exception:  # noqa: BLE001 - a broken dist is reported as "no direct_url"
        return None
    if not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):       # RecursionError: nested too deeply
        return {"unreadable": text[:200]}


def _ships(dist, package):
    init = package + "/__init__.py"
    # RECORD read as text: ``dist.files`` builds a path object per row (torch alone has tens of
    # thousands), 80% of this probe's time with a system site-packages behind the env (issue 20).
    # Only the rows that mention the file are parsed (as CSV, normalised as a PackagePath would be:
    # quotes, "./").  No RECORD (an egg-info install): the full listing, as before.
    try:
        record = dist.read_text("RECORD")
    except Exception:  # noqa: BLE001 - unreadable: fall back to importlib's own listing
        record = None
    if record is not None:
        if init not in record.replace("\\", "/"):
            return False
        rows = csv.reader(ln for ln in record.splitlines() if init in ln.replace("\\", "/"))
        return any(row and posixpath.normpath(row[0].replace("\\", "/")) == init for row in rows)
    for f in dist.files or ():
        if str(f).replace("\\", "/") == init:
            return True
    return False


def _origin(package):
    try:
        spec = importlib.util.find_spec(package)
    except Exception as exc:  # noqa: BLE001
        return {"origin": None, "error": repr(exc)}
    if spec is None:
        return {"origin": None, "error": "not importable"}
    locations = list(spec.submodule_search_locations or [])
    return {"origin": spec.origin, "locations": locations, "error": None}


def _cuda(libs):
    reasons = []
    for lib in libs:
        try:
            ctypes.CDLL(lib)
        except OSError as exc:
            reasons.append(f"{lib}: {exc}")
            continue
        return {"present": True, "lib": lib, "reason": f"{lib} loads"}
    return {"present": False, "lib": None, "reason": "; ".join(reasons) or "no CUDA library named"}


def _lib_dirs():
    """Where the loader would find torch's and the CUDA wheels' libraries in this env."""
    dirs = []
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        dirs.append(os.path.join(os.path.dirname(spec.origin), "lib"))
    for entry in sys.path:
        if entry.endswith("site-packages"):
            dirs += sorted(glob.glob(os.path.join(entry, "nvidia", "*", "lib")))
    return dirs


def _sibling(name):
    """A module of this directory, loaded by path (-I leaves the script's directory off sys.path)."""
    where = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location("october_" + name, where)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _static(path):
    if not path or not os.path.isfile(path):
        return {"error": f"no file {path}"}
    try:
        elf_symbols = _sibling("elf_symbols")
        dirs = _lib_dirs()
        torch_libs = sorted(glob.glob(os.path.join(dirs[0], "*.so*"))) if dirs else []
        left, missing, checked = elf_symbols.unresolved(path, dirs, extra_providers=torch_libs)
    except Exception as exc:  # noqa: BLE001 - reported, judged by the guard
        return {"error": repr(exc)[:400]}
    return {"file": path, "checked": checked, "missing_libs": missing,
            "driver_symbols": [s for s in left if elf_symbols.is_driver_symbol(s)],
            "unresolved": [s for s in left if not elf_symbols.is_driver_symbol(s)][:40]}


def _markers():
    """PEP 508's marker environment of this interpreter (the keys of packaging's ``default_environment``): the
    install step evaluates the markers of requirements that ask for a distribution by URL with it."""
    impl = sys.implementation
    v = impl.version
    version = f"{v.major}.{v.minor}.{v.micro}" + (f"{v.releaselevel[0]}{v.serial}" if v.releaselevel != "final" else "")
    return {"implementation_name": impl.name, "implementation_version": version, "os_name": os.name,
            "platform_machine": platform.machine(), "platform_release": platform.release(),
            "platform_system": platform.system(), "platform_version": platform.version(),
            "python_full_version": platform.python_version(),
            "platform_python_implementation": platform.python_implementation(),
            "python_version": ".".join(platform.python_version_tuple()[:2]), "sys_platform": sys.platform}


def main(argv):
    req = json.loads(argv[1])
    dists = list(md.distributions())
    out = {"python": sys.version.split()[0], "executable": sys.executable, "markers": _markers()}
    tname = req["torch"]
    # names from the METADATA headers only (checks/probes/distributions.py's reader): ``d.metadata`` parses each whole
    # file, long descriptions included, for the ~200 distributions of a system site behind the env
    headers = _sibling("distributions").headers
    tdists = [d for d in dists if headers(d)[0].lower() == tname]
    out["torch"] = {"versions": sorted(d.version for d in tdists), "import": _origin(tname),
                    "dists": [{"version": d.version, "site": str(d.locate_file(""))} for d in tdists]}
    forks = {}
    for package, src in req["forks"].items():
        found = []
        for d in dists:
            du = _direct_url(d)
            ships = _ships(d, package)
            points_here = bool(du) and isinstance(du.get("url"), str) and du["url"].rstrip("/").endswith(
                "/" + src.rstrip("/").split("/")[-1])
            if ships or points_here:
                found.append({"name": d.metadata["Name"], "version": d.version, "direct_url": du,
                              "ships_package": ships})
        forks[package] = {"dists": found, "import": _origin(package)}
    out["forks"] = forks
    cuda = _cuda(req.get("cuda_libs", []))
    out["cuda"] = cuda
    imports = {}
    for name in req.get("imports", []):
        if not cuda["present"]:
            # no driver: importing would stop at libcuda.so.1 before any symbol is resolved, so the
            # torch ABI is checked statically instead (checks/probes/elf_symbols.py)
            imports[name] = {"attempted": False, "ok": None, "error": None,
                             "static": _static(req.get("files", {}).get(name))}
            continue
        try:
            importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001 - any failure to import is the finding
            tb = traceback.format_exception_only(type(exc), exc)
            imports[name] = {"attempted": True, "ok": False, "error": "".join(tb).strip()[-800:]}
        else:
            imports[name] = {"attempted": True, "ok": True, "error": None}
    out["imports"] = imports
    sys.stdout.write(MARK + json.dumps(out, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
