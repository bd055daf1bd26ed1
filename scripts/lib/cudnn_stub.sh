#!/usr/bin/env bash
# For the test suite's CUDA stage only (scripts/debian13_stage.sh cuda), run inside its Debian 13
# root: a stand-in libcudnn.so.9 so that Debian's CUDA LibTorch loads on a machine without a GPU.
#
# Why: libtorch-cuda-2.6 needs libcudnn.so.9, which Debian ships only through nvidia-cudnn, a
# downloader that fetches cuDNN from NVIDIA's site once its license is accepted; CI cannot reach
# that site, so the stage declines the license (nothing is downloaded) and builds this stub: every
# cudnn* function that Debian's LibTorch imports, under the version node libcudnn.so.9, each one
# aborting with a message if it is ever called. Without a GPU nothing calls cuDNN. It goes to
# /usr/local/lib/mixprec-ci-cudnn-stub and is only ever made in a root that carries the CI marker
# /etc/mixprec-ci-root: never on a user's machine or a GPU machine, which need the real cuDNN.
set -euo pipefail
if [[ ! -e /etc/mixprec-ci-root ]]; then
  echo "cudnn_stub.sh: refusing to run outside the test suite's CUDA root (no /etc/mixprec-ci-root)" >&2
  exit 2
fi
libdir=/usr/lib/x86_64-linux-gnu
dest=/usr/local/lib/mixprec-ci-cudnn-stub
if [[ -e $libdir/libcudnn.so.9 ]]; then
  echo "cudnn_stub.sh: a real $libdir/libcudnn.so.9 is installed; no stub needed"
  exit 0
fi
symbols=$(for lib in "$libdir"/libtorch*.so "$libdir"/libc10*.so; do
  nm -D --undefined-only "$lib" 2>/dev/null
done | sed -n 's/^ *U \(cudnn[A-Za-z0-9_]*\)@libcudnn\.so\.9$/\1/p' | sort -u)
if [[ -z $symbols ]]; then
  echo "cudnn_stub.sh: no cudnn* symbols imported from libcudnn.so.9; is libtorch-cuda installed?" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{
  echo '#include <stdio.h>'
  echo '#include <stdlib.h>'
  echo 'static void stub(const char* f) { fprintf(stderr, "mixprec CI cuDNN stub: %s called\n", f); abort(); }'
  for s in $symbols; do echo "int $s(void) { stub(\"$s\"); return 1; }"; done
} >"$work/stub.c"
{
  echo 'libcudnn.so.9 {'
  echo '  global:'
  for s in $symbols; do echo "    $s;"; done
  echo '  local: *;'
  echo '};'
} >"$work/stub.map"
mkdir -p "$dest"
gcc -shared -fPIC -O1 -o "$dest/libcudnn.so.9" -Wl,-soname,libcudnn.so.9 \
  -Wl,--version-script="$work/stub.map" "$work/stub.c"
echo "$dest" >/etc/ld.so.conf.d/mixprec-ci-cudnn-stub.conf
ldconfig
echo "cudnn_stub.sh: $(wc -w <<<"$symbols") cudnn* functions stubbed in $dest/libcudnn.so.9"
