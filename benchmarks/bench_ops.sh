#!/usr/bin/env bash
# Bench the named ops one process each (a crash or a time limit loses one op's rows, not
# the run's). Results go to WORK/<Op>.json and .log; after each op they are packed into
# OUT/bench.tgz (one file to fetch). Merge them with benchmarks/merge_bench.py.
#   benchmarks/bench_ops.sh OUT SECONDS_PER_OP [--quick] [--baselines LIST] [--flush MODE]
#                           Op [Op ...]
set -u
out=$1; per=$2; shift 2
flags=()
if [ "${1:-}" = "--quick" ]; then flags+=(--quick); shift; fi
if [ "${1:-}" = "--baselines" ]; then flags+=(--baselines "$2"); shift 2; fi
if [ "${1:-}" = "--flush" ]; then flags+=(--flush "$2"); shift 2; fi
work=$(mktemp -d)
mkdir -p "$out"
for op in "$@"; do
  start=$(date +%s)
  timeout "$per" python3 -m opspec.cli bench "$op" --device cuda "${flags[@]}" \
    --json "$work/$op.json" > "$work/$op.log" 2>&1
  echo "$op: exit $? in $(( $(date +%s) - start )) s; $(tail -n 1 "$work/$op.log")"
  tar czf "$out/bench.tgz" -C "$work" .
done
