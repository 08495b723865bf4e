#!/bin/sh
# Re-resolve the committed index locks on PyPI (uv pip compile; see installer/lock/indexlock.py).
# Usage: locks/regenerate.sh [RECIPE...]      (default: every recipe under recipes/)
set -e
cd "$(dirname "$0")/.."
exec uv run python -m october.installer.lock.indexlock "$@"
