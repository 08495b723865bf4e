"""WHEEL's ``Tag`` lines against the tags in the wheel's file name, allowing one known retag.

vLLM's release wheels declare ``Tag: cp38-abi3-linux_x86_64`` in ``WHEEL`` but are renamed to a
``manylinux`` platform without rewriting it.  Only that is accepted (and recorded): a declared
``linux_<arch>`` tag paired with a ``manylinux*``/``musllinux_*`` file-name tag of the same
interpreter, ABI and arch; every other difference fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# manylinux1_x86_64, manylinux2010_x86_64, manylinux2014_x86_64, manylinux_2_31_x86_64, musllinux_1_2_x86_64
_POLICY = re.compile(r"^(?:manylinux(?:1|2010|2014)|manylinux_\d+_\d+|musllinux_\d+_\d+)_(?P<arch>\w+)$")
_PLAIN = re.compile(r"^linux_(?P<arch>\w+)$")


@dataclass(frozen=True)
class Retag:
    wheel: str            # as WHEEL declares it: cp38-abi3-linux_x86_64
    filename: str         # as the file name says: cp38-abi3-manylinux_2_31_x86_64

    def as_json(self) -> dict[str, str]:
        return {"wheel": self.wheel, "filename": self.filename}


def _plain_of(tag: str) -> str | None:
    """``cp38-abi3-manylinux_2_31_x86_64`` -> ``cp38-abi3-linux_x86_64``; None for other platforms."""
    parts = tag.split("-")
    m = _POLICY.match(parts[2]) if len(parts) == 3 and all(parts) else None
    return f"{parts[0]}-{parts[1]}-linux_{m.group('arch')}" if m else None


def match_tags(declared: frozenset[str], file_tags: frozenset[str]) -> tuple[tuple[Retag, ...], str | None]:
    """(the retags accepted, or a problem line for the ``tags`` check)."""
    if declared == file_tags:
        return (), None
    retags: list[Retag] = []
    unmatched_file: list[str] = []
    for tag in sorted(file_tags - declared):
        plain = _plain_of(tag)
        if plain is not None and plain in declared and _PLAIN.match(plain.rsplit("-", 1)[-1]):
            retags.append(Retag(plain, tag))
        else:
            unmatched_file.append(tag)
    used = {r.wheel for r in retags}
    unmatched_declared = sorted(t for t in declared - file_tags if t not in used)
    if not unmatched_file and not unmatched_declared and declared:
        return tuple(retags), None
    shown = ", ".join(sorted(declared)) or "none"
    detail = []
    if unmatched_declared:
        detail.append(f"declared but not in the file name: {', '.join(unmatched_declared)}")
    if unmatched_file:
        detail.append(f"in the file name with no matching declared tag: {', '.join(unmatched_file)}")
    return (), (f"WHEEL declares tags {shown}, expected the file name's {', '.join(sorted(file_tags))} "
                "(or linux_<arch> retagged to manylinux/musllinux of the same interpreter, ABI and arch); "
                + "; ".join(detail))
