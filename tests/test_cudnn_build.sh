#!/usr/bin/env bash
# The build with cuDNN switched off and on (meson option cudnn): each
# configures a scratch build folder from this source tree and links dpscale;
# disabled: no cuDNN in build_config.h or in the binary's libraries, and
# meson's summary says why; enabled: libcudnn linked, its version in
# build_config.h. The build under test (DPSCALE, the binary's build folder)
# is checked instead of a scratch build when it was configured so already
# (enabled: a build whose cudnn option found cuDNN, as auto does where the
# toolkit has it), which saves building the kernels again. Skipped (77)
# without nvcc, or for enabled without cuDNN.
#   tests/test_cudnn_build.sh disabled|enabled [DPSCALE]
set -u
cases="disabled enabled"
# --list: this file's meson tests, for tests/meson.build (the format of tests/listing.py)
if [ "${1:-}" = --list ]; then
  for c in $cases; do printf 'cudnn build %s\tbuild,nosan\t1800\ttrue\t10\t%s\t@dpscale@\n' "$c" "$c"; done
  exit 0
fi
case_=${1:?usage: test_cudnn_build.sh disabled|enabled [DPSCALE]}
under_test=${2:+$(cd "$(dirname "$2")/.." && pwd)}
src=$(cd "$(dirname "$0")/.." && pwd)
cuda_root=${DPSCALE_CUDA_ROOT:-/usr/local/cuda}
[ -x "$cuda_root/bin/nvcc" ] || { echo "SKIP: no nvcc under $cuda_root"; exit 77; }
if [ "$case_" = enabled ] && ! compgen -G "$cuda_root/include/cudnn.h" >/dev/null; then
  echo "SKIP: no cuDNN under $cuda_root (the wheel's is found by meson; this test builds the toolkit's)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL test_cudnn_build.sh $case_: $*" >&2
  [ -f "$tmp/log" ] && tail -n 30 "$tmp/log" >&2
  exit 1
}
# The build under test, when it is this case's configuration with CUDA on;
# else a scratch folder configured for it
configured_so() {
  local conf=$under_test/build_config.h
  [ -n "$under_test" ] && [ -f "$conf" ] && grep -q 'DPS_HAVE_CUDA 1' "$conf" || return 1
  if [ "$case_" = enabled ]; then grep -q 'DPS_HAVE_CUDNN 1' "$conf"
  else grep -q 'DPS_CUDNN_WHY "-Dcudnn=disabled"' "$conf"; fi
}
if configured_so; then
  b=$under_test
  echo "the build under test ($b) has -Dcudnn=$case_'s configuration: checking it"
else
  b=$tmp/b
  # unoptimised (-Dbuildtype=plain): what is checked is the configuration and the link
  meson setup "$b" "$src" -Dcuda=enabled -Dcuda-arch=90 "-Dcuda-root=$cuda_root" \
    -Dnccl=disabled -Dgloo=disabled "-Dcudnn=$case_" -Dbuildtype=plain >"$tmp/log" 2>&1 ||
    fail "meson setup -Dcudnn=$case_ failed"
  ninja -C "$b" -j2 src/dpscale >>"$tmp/log" 2>&1 || fail "ninja could not build and link dpscale"
fi
conf=$b/build_config.h
libs=$(ldd "$b/src/dpscale") || fail "ldd cannot read the binary"
if [ "$case_" = disabled ]; then
  grep -q DPS_HAVE_CUDNN "$conf" && fail "build_config.h defines DPS_HAVE_CUDNN with -Dcudnn=disabled"
  grep -q 'DPS_CUDNN_WHY "-Dcudnn=disabled"' "$conf" || fail "build_config.h gives no reason: $(grep CUDNN "$conf")"
  grep -q libcudnn <<<"$libs" && fail "the binary links cuDNN with -Dcudnn=disabled"
else
  grep -q 'DPS_HAVE_CUDNN 1' "$conf" || fail "build_config.h lacks DPS_HAVE_CUDNN with -Dcudnn=enabled"
  grep -Eq 'DPS_CUDNN_BUILD_VERSION "[0-9]+\.[0-9]+\.[0-9]+"' "$conf" || fail "no cuDNN version: $(grep CUDNN "$conf")"
  grep -q 'libcudnn.so' <<<"$libs" || fail "the binary does not link libcudnn: $libs"
  nm -u "$b/src/dpscale" | grep -q cudnnFindConvolutionForwardAlgorithmEx ||
    fail "the binary does not call cudnnFindConvolutionForwardAlgorithmEx"
fi
echo "ok: -Dcudnn=$case_ configured, linked and checked"
