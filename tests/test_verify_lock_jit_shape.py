"""A hand-edited lock whose ``[tool.october] jit`` holds something other than tables: verify names the lock
(its sha256 against the receipt) instead of stopping with an internal error (exit 70)."""

from __future__ import annotations

from pathlib import Path

import pytest

from october.installer.core.paths import StackPaths
from october.installer.verify.stack import check_jit


@pytest.mark.parametrize("jit", [["decode"], ["a", 3], "decode", {"uri": "x"}])
def test_a_jit_record_that_is_no_list_of_tables_is_not_an_internal_error(tmp_path: Path, jit: object) -> None:
    paths = StackPaths(tmp_path / "stack")
    looked, diffs = check_jit(paths, {"tool": {"october": {"jit": jit}}}, "rerun")
    assert diffs == [] and looked == 0
