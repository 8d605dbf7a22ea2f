#!/usr/bin/env bash
# Run the omega demo cell on this machine: creates .venv if missing, installs the project into it
# and runs `omega demo` (etcd + agents + schedulers + generator + live monitor; Ctrl-C stops all).
# Flags pass through, e.g. `bash tools/demo.sh --duration 30` ends with a summary and a check.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/venv.sh
ensure_venv
.venv/bin/python -m pip install -q -e .
exec .venv/bin/omega demo "$@"
