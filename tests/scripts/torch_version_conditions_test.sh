#!/usr/bin/env bash
# Every LibTorch version condition is one of the named macros of include/mixprec/torch_version.h:
# no file compares TORCH_VERSION_MAJOR/MINOR with < or > itself, so each workaround is found, and
# deleted, in one place when its oldest LibTorch is no longer supported.
set -euo pipefail
cd "$(dirname "$0")/../.."
hits=$(grep -rnE 'TORCH_VERSION_(MAJOR|MINOR)[[:space:]]*(<=|>=|<[^<]|>[^>])' src include tests bench examples \
  --include='*.h' --include='*.hpp' --include='*.cpp' --include='*.cu' --include='*.cuh' |
  grep -v '^include/mixprec/torch_version.h:' || true)
if [[ -n $hits ]]; then
  echo "$hits"
  echo "FAIL: LibTorch version conditions outside include/mixprec/torch_version.h (use its macros)"
  exit 1
fi
echo "PASS: every LibTorch version condition goes through include/mixprec/torch_version.h"
