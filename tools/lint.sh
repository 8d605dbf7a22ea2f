#!/usr/bin/env bash
# The linter over the whole tree, the strict type checker over the core and the model (the
# settings are in pyproject.toml). Run from the project root after the venv has the lint extra.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=(cellstate/model.py cellstate/resources.py cellstate/devices.py cellstate/fastbuild.py
       cellstate/plan.py cellstate/scheduler_stats.py)
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy --strict: omega/ and the model"
.venv/bin/python -m mypy omega "${MODEL[@]}"
