"""What the env step builds the stack's environment from: ``[python]``, ``[torch]``, ``[build]``, ``[sources]``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Sources:
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


def parse_python(top: Mapping[str, Any]) -> str:
    return str(top["python"]["version"])


def parse_torch(top: Mapping[str, Any]) -> TorchPin:
    tt = top["torch"]
    return TorchPin(version=tt["version"], index_url=tt.get("index"), source=tt.get("source", "index"),
                    allow_system=tt.get("allow_system", False))


def parse_build(top: Mapping[str, Any]) -> tuple[str, ...]:
    """``[build] requirements``: installed before the forks (they build without isolation)."""
    return tuple(top.get("build", {}).get("requirements", ()))


def parse_sources(recipe_path: Path, top: Mapping[str, Any]) -> Sources:
    """``[sources]``; a find-links entry is a URL as is, or a local path relative to the recipe file."""
    st = top.get("sources", {})
    return Sources(index_url=st.get("index_url"), extra_index_urls=tuple(st.get("extra_index_urls", ())),
                   find_links=tuple(x if "://" in x else str((recipe_path.parent / x).resolve())
                                    for x in st.get("find_links", ())),
                   no_index=st.get("no_index", False))
