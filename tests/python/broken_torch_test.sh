#!/usr/bin/env bash
# differential_cpu.py with a torch module that fails to import (a broken install) must fail
# (exit 2), not skip (exit 77): a skip would let a stage with python3-torch pass without a single
# comparison. Usage: broken_torch_test.sh DIFFERENTIAL_CPU_PY
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/torch"
echo 'raise RuntimeError("simulated broken torch install")' >"$work/torch/__init__.py"
rc=0
PYTHONPATH=$work python3 "$1" --exe /nonexistent --mode train --dir "$work/out" >"$work/log" 2>&1 || rc=$?
cat "$work/log"
if ! grep -q "simulated broken torch install" "$work/log"; then
  echo "FAIL: differential_cpu.py did not reach the import of torch"
  exit 1
fi
if [[ $rc -ne 2 ]]; then
  echo "FAIL: exit $rc with a broken torch; want 2 (77 would be a silent skip)"
  exit 1
fi
echo "PASS: a broken torch is a failure, not a skip"
