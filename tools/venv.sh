# Sourced by tools/demo.sh and tools/test.sh: creates .venv if missing, on the interpreter that
# `omega_python` picks, and upgrades its pip.
#
# The interpreter: $OMEGA_PYTHON if set; else the distribution's /usr/bin/python3 when it is
# CPython >= 3.11 with venv and ensurepip; else `python3` on PATH. The distribution's build is
# preferred because the fauxmaster's replay is CPU-bound pure Python: Debian's CPython is
# built with profile-guided optimization and LTO, a plain pyenv build is not, and the replay
# runs measurably faster on the former (docs/BENCHMARKS.md, "The interpreter").

omega_python() {
  if [ -n "${OMEGA_PYTHON:-}" ]; then
    echo "$OMEGA_PYTHON"
    return
  fi
  local py
  for py in /usr/bin/python3 python3; do
    if command -v "$py" >/dev/null 2>&1 &&
      "$py" -c 'import sys, ensurepip, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$py"
      return
    fi
  done
  echo python3
}

ensure_venv() {
  if [ ! -x .venv/bin/python ]; then
    "$(omega_python)" -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  fi
}
