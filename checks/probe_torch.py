"""Facts about an interpreter and its torch, printed as one line ``OCTOBER_TORCH {json}``.

Run as ``PYTHON -I checks/probe_torch.py`` (standard library + ``import torch``); never
imported by the tool.  Decides nothing: :mod:`october.installer.steps.env.systorch` judges.
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
           "base_prefix": sys.base_prefix, "site_packages": dirs}
    try:
        import torch
        import torch.version
    except BaseException as exc:  # noqa: BLE001 - any failure to import is the finding
        out["error"] = f"import torch failed: {type(exc).__name__}: {exc}"[-400:]
    else:
        out["version"] = str(torch.__version__)
        out["cuda"] = getattr(torch.version, "cuda", None)
        out["file"] = getattr(torch, "__file__", None)
        try:
            from importlib import metadata
            dist = metadata.distribution("torch")
            out["dist_version"] = dist.version
            out["dist_site"] = str(dist.locate_file(""))
        except Exception as exc:  # noqa: BLE001
            out["dist_error"] = repr(exc)[-200:]
    sys.stdout.write(MARK + json.dumps(out, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
