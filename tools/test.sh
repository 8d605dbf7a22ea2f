#!/usr/bin/env bash
# Install the project with its test extras into .venv (created if missing, see tools/venv.sh) and
# run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/venv.sh
ensure_venv
.venv/bin/python -m pip install -q -e '.[test]'
exec .venv/bin/python -m pytest -q "$@"
