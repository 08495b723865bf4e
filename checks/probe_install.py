"""Post-install facts, read *inside the stack env* (run as ``STACK/env/bin/python -I checks/probe_install.py JSON``).

Standard library only.  Prints one line ``OCTOBER_PROBE {json}``; decides nothing
(``october.installer.steps.install.guards`` judges the facts).  The JSON argument names the
torch distribution, each fork's import name and checkout, the modules to import
when CUDA libraries exist, and which libraries count as "CUDA exists".
"""

import ctypes
import importlib
import importlib.metadata as md
import importlib.util
import json
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
    except ValueError:
        return {"unreadable": text[:200]}


def _ships(dist, package):
    init = package + "/__init__.py"
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


def main(argv):
    req = json.loads(argv[1])
    dists = list(md.distributions())
    out = {"python": sys.version.split()[0], "executable": sys.executable}
    tname = req["torch"]
    tdists = [d for d in dists if (d.metadata["Name"] or "").lower() == tname]
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
            imports[name] = {"attempted": False, "ok": None, "error": None}
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
