"""What the env step builds the stack's environment from: ``[python]``, ``[torch]``, ``[build]``, ``[sources]``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .tomlcheck import MAX_URL, Table, version_key

TORCH_SOURCES = ("index", "system")


@dataclass(frozen=True)
class Sources:
    """Where uv finds packages. Real recipes use indexes; fixtures use a local dir."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    no_index: bool = False


@dataclass(frozen=True)
class TorchPin:
    version: str            # exact, with local build tag when the index has one: "2.10.0+cu128"
    index_url: str | None = None
    source: str = "index"   # "system": torch comes from a given interpreter (see october.installer.pyenv.systorch)
    allow_system: bool = False          # an index recipe that may also take torch from --system-python
    system_python: str | None = None    # the interpreter, set from --system-python (never from the recipe file)

    @property
    def from_system(self) -> bool:
        return self.source == "system"

    @property
    def requirement(self) -> str:
        return f"torch=={self.version}"


def parse_python(top: Table) -> str:
    """``[python] version``: the interpreter version the stack env is made with."""
    py = top.table("python")
    assert py is not None
    python = version_key(py, "version")
    py.done()
    return python or ""


def parse_torch(top: Table) -> TorchPin:
    tt = top.table("torch")
    assert tt is not None
    torch = TorchPin(version=version_key(tt, "version") or "",
                     index_url=tt.get("index", str, required=False, max_len=MAX_URL),
                     source=tt.get("source", str, required=False, default="index"),
                     allow_system=tt.get("allow_system", bool, required=False, default=False))
    if torch.index_url is not None and not re.match(r"^(https?|file)://", torch.index_url):
        raise tt.err("index", "an https:// (or file://) package index URL", torch.index_url)
    if torch.source not in TORCH_SOURCES:
        raise tt.err("source", "'index' (install the pinned torch) or 'system' (torch from --system-python)",
                     torch.source)
    tt.done()
    return torch


def parse_build(top: Table) -> tuple[str, ...]:
    """``[build] requirements``: installed before the forks (they build without isolation)."""
    bt = top.table("build", required=False)
    if bt is None:
        return ()
    requirements = bt.str_list("requirements")
    bt.done()
    return requirements


def parse_sources(top: Table) -> Sources:
    st = top.table("sources", required=False)
    if st is None:
        return Sources()
    sources = Sources(index_url=st.get("index_url", str, required=False, max_len=MAX_URL),
                      extra_index_urls=st.str_list("extra_index_urls", required=False, max_len=MAX_URL),
                      find_links=tuple(_local_or_url(top.file, x)
                                       for x in st.str_list("find_links", required=False, max_len=MAX_URL)),
                      no_index=st.get("no_index", bool, required=False, default=False))
    st.done()
    return sources


def _local_or_url(recipe_path: Path, value: str) -> str:
    """A find-links entry: a URL as is, a local path relative to the recipe file."""
    if "://" in value:
        return value
    return str((recipe_path.parent / value).resolve())
