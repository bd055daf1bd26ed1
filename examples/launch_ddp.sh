#!/usr/bin/env bash
# Starts N local ranks of a program the way torchrun does (RANK, LOCAL_RANK, WORLD_SIZE,
# MASTER_ADDR=127.0.0.1, MASTER_PORT) and waits for all; if one fails, the others are stopped.
# Usage: examples/launch_ddp.sh [-n N] [-p PORT] <program> [args...]
#   e.g. examples/launch_ddp.sh -n 4 build/examples/ddp_train 200
set -euo pipefail

nproc_per_node=2
port=$((20000 + RANDOM % 20000))  # a random port, so concurrent jobs rarely collide
while getopts "n:p:h" opt; do
  case $opt in
    n) nproc_per_node=$OPTARG ;;
    p) port=$OPTARG ;;
    *) sed -n '2,5p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if (($# < 1)); then sed -n '2,5p' "$0"; exit 2; fi

export MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=$nproc_per_node
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # N ranks share this machine's cores
pids=()
for ((r = 0; r < nproc_per_node; r++)); do
  RANK=$r LOCAL_RANK=$r "$@" &
  pids+=($!)
done

# Stop the ranks we started (by pid) when one fails or on Ctrl-C.
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap 'stop_all; exit 130' INT TERM

status=0
while ((${#pids[@]} > 0)); do
  for i in "${!pids[@]}"; do
    p=${pids[$i]}
    if kill -0 "$p" 2>/dev/null; then continue; fi
    set +e
    wait "$p"  # bash kept its exit status
    rc=$?
    set -e
    unset "pids[$i]"
    if ((rc != 0 && status == 0)); then
      status=$rc
      echo "launch_ddp: rank $i exited with status $rc; stopping the others" >&2
      stop_all
    fi
  done
  sleep 0.2
done
exit $status
