"""Facts about an interpreter and its torch, printed as one line ``OCTOBER_TORCH {json}``.

Run as ``PYTHON -I checks/probes/torch_facts.py`` (standard library + ``import torch``); never
imported by the tool.  Decides nothing: :mod:`october.installer.pyenv.systorch` judges.

``--locate`` (preflight) finds torch and reads its ``torch/version.py`` without importing torch: the
import of a CUDA torch took 6.7 s cold on the H200, the whole rest of preflight 0.1 s.  The facts are the
same keys; whether ``import torch`` works and resolves to that torch is proved later, in the stack's
own env, by the env step (this probe without ``--locate``) and the install guard.
"""

import json
import site
import sys
import sysconfig

MARK = "OCTOBER_TORCH "


def main():
    paths = sysconfig.get_paths()
    dirs = []
    for d in list(site.getsitepackages()) + [paths.get("purelib"), paths.get("platlib")]:
        if d and d not in dirs:
            dirs.append(d)
    out = {"python": sys.version.split()[0], "executable": sys.executable, "prefix": sys.prefix,
           "base_prefix": sys.base_prefix, "site_packages": dirs, "stdlib": paths.get("stdlib"),
           "cache_tag": sys.implementation.cache_tag}
    found = _locate(out) if "--locate" in sys.argv[1:] else _import(out)
    if found:
        try:
            from importlib import metadata
            dist = metadata.distribution("torch")
            out["dist_version"] = dist.version
            out["dist_site"] = str(dist.locate_file(""))
        except Exception as exc:  # noqa: BLE001
            out["dist_error"] = repr(exc)[-200:]
    sys.stdout.write(MARK + json.dumps(out, sort_keys=True) + "\n")
    return 0


def _import(out):
    try:
        import torch
        import torch.version
    except BaseException as exc:  # noqa: BLE001 - any failure to import is the finding
        out["error"] = f"import torch failed: {type(exc).__name__}: {exc}"[-400:]
        return False
    out["version"] = str(torch.__version__)
    out["cuda"] = getattr(torch.version, "cuda", None)
    out["file"] = getattr(torch, "__file__", None)
    return True


def _locate(out):
    """The same facts from the files: where ``import torch`` would load it, and its version module."""
    import importlib.util
    import os

    try:
        spec = importlib.util.find_spec("torch")
    except BaseException as exc:  # noqa: BLE001
        spec, why = None, f"{type(exc).__name__}: {exc}"
    else:
        why = "no module named 'torch' on its path"
    if spec is None or not spec.origin or not spec.origin.endswith("__init__.py"):
        out["error"] = f"import torch failed: {why}"[-400:]
        return False
    version_py = os.path.join(os.path.dirname(spec.origin), "version.py")
    names = {}
    try:
        with open(version_py, encoding="utf-8") as fh:
            exec(compile(fh.read(), version_py, "exec"), names)   # torch's own generated constants
    except BaseException as exc:  # noqa: BLE001
        out["error"] = f"import torch failed: {version_py} unreadable ({type(exc).__name__}: {exc})"[-400:]
        return False
    out["version"] = str(names.get("__version__"))
    out["cuda"] = names.get("cuda")
    out["file"] = spec.origin
    return True


if __name__ == "__main__":
    sys.exit(main())
