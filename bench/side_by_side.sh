#!/usr/bin/env bash
# Run one benchmark for two builds at the same time, one pinned to each of the first two cores,
# swapping the cores every round, so both meet the shared host's fast and slow moments alike.
# Prints each run's process CPU seconds (and digest line, if the benchmark prints one).
#
#   bench/side_by_side.sh ROUNDS TREE_A PYTHON_A TREE_B PYTHON_B BENCH [ARGS...]
#   e.g. bench/side_by_side.sh 2 /work/old .venv/bin/python . .venv/bin/python \
#        bench/bench_replay_google.py --initial-state recorded --digest
set -euo pipefail
if [ $# -lt 6 ]; then
  sed -n '2,8p' "$0" >&2
  exit 2
fi
absolute() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }  # a venv's python stays itself
rounds=$1 tree_a=$(absolute "$2") py_a=$(absolute "$3") tree_b=$(absolute "$4") py_b=$(absolute "$5")
shift 5

run() {  # core tree python label bench-args...
  local core=$1 tree=$2 py=$3 label=$4 out
  shift 4
  out=$(cd "$tree" && PYTHONPATH="$tree" taskset -c "$core" "$py" "$@" 2>/dev/null) || {
    echo "$label: failed" >&2
    return 1
  }
  echo "$label core $core: cpu $(grep -oP 'process CPU time \K[0-9.]+' <<<"$out" | head -1) s" \
    "$(grep -m1 '^digest' <<<"$out" || true)"
}

for ((r = 1; r <= rounds; r++)); do
  a=$(((r + 1) % 2)) b=$((r % 2))
  run "$a" "$tree_a" "$py_a" "round $r A" "${@}" &
  run "$b" "$tree_b" "$py_b" "round $r B" "${@}" &
  wait
done
