#!/usr/bin/env bash
# Installs what dpscale needs to build and plot (Debian packages, only those
# missing) and configures a Meson build folder. Idempotent: a configured
# folder is left as it is. Prints one line a step; apt-get's and meson's
# output go to a log (DIR/setup.log once DIR is configured, a file under
# $TMPDIR before), whose end is printed when a step fails.
#   scripts/setup.sh                  configure build/
#   scripts/setup.sh DIR [-Dopt=val]  configure DIR with extra Meson options
#   scripts/setup.sh --with-torch ... also PyTorch (python3-torch) and
#                                     torchvision, for scripts/torch_reference.py,
#                                     scripts/model_export.py and the tests
#                                     that check dpscale against them, and Open
#                                     MPI's mpirun and mpicc (openmpi-bin,
#                                     libopenmpi-dev) for the launcher tests and
#                                     scripts/allreduce_vs_mpi.sh (skipped
#                                     without them); DPSCALE_WITH_TORCH=1 in the
#                                     environment does the same
set -euo pipefail
cd "$(dirname "$0")/.."

with_torch=${DPSCALE_WITH_TORCH:-0}
if [ "${1:-}" = --with-torch ]; then
  with_torch=1
  shift
fi
builddir=${1:-build}
[ $# -gt 0 ] && shift

missing=()
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v meson >/dev/null 2>&1 || missing+=(meson)
command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v git >/dev/null 2>&1 || missing+=(git)
pkg-config --exists openblas 2>/dev/null || missing+=(libopenblas-dev)
# oneDNN: the host backend's GEMM (meson option host-gemm; OpenBLAS is the fallback)
[ -f /usr/include/oneapi/dnnl/dnnl.h ] || missing+=(libdnnl-dev)
/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1 || missing+=(python3-matplotlib)
# Gloo: ddp between CPU ranks on several hosts (--comm gloo), behind a C++ shim
[ -f /usr/include/gloo/rendezvous/context.h ] || missing+=(libgloo-dev)
command -v c++ >/dev/null 2>&1 || missing+=(g++)
# ip and tc: the tests' emulated hosts (network namespaces; they are skipped without root)
command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1 || missing+=(iproute2)
# strace: the folder tests stop a process at a system call (they are skipped without it)
command -v strace >/dev/null 2>&1 || missing+=(strace)
if [ "$with_torch" = 1 ]; then
  /usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 || missing+=(python3-numpy)
  /usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || missing+=(python3-torch)
  /usr/bin/python3 -c 'import torchvision' >/dev/null 2>&1 || missing+=(python3-torchvision)
  command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin) # the launcher tests' mpirun
  command -v mpicc >/dev/null 2>&1 || missing+=(libopenmpi-dev) # scripts/allreduce_vs_mpi.sh
fi

# The log: DIR/setup.log when DIR is configured (each run's steps appended);
# before, a file of its own under $TMPDIR, moved to DIR/setup.log once meson
# has configured DIR
if [ -f "$builddir/build.ninja" ]; then
  log=$builddir/setup.log
else
  log=$(mktemp "${TMPDIR:-/tmp}/dpscale-setup.XXXXXX.log")
fi

# step WHAT COMMAND...: runs COMMAND with its output appended to the log; when
# it fails, prints what failed, the log's last lines and where the log is,
# and exits with COMMAND's status.
step() {
  local what=$1 rc=0 start
  shift
  echo "== $(date '+%F %T') $what: $*" >>"$log"
  start=$(wc -l <"$log")
  "$@" >>"$log" 2>&1 || rc=$?
  [ $rc -eq 0 ] && return 0
  {
    echo "setup: FAILED while $what: '$*' exited $rc; the last lines of its output:"
    tail -n "+$((start + 1))" "$log" | tail -n 20 | sed 's/^/  | /'
    echo "setup: fix what it says above and run scripts/setup.sh again (all of the output: $log)"
  } >&2
  exit $rc
}

if [ ${#missing[@]} -gt 0 ]; then
  sudo=
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || {
      echo "setup: need root to install ${missing[*]}: run as root or install them with apt-get" >&2
      exit 1
    }
    sudo=sudo
  fi
  echo "setup: installing ${missing[*]} (apt-get)"
  step "installing ${missing[*]}" $sudo apt-get update -q
  step "installing ${missing[*]}" $sudo env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# the tests that skip here, said once, before the line naming the next command
needs=$(/usr/bin/python3 tests/torch_needs.py 2>/dev/null || true)
if [ -n "$needs" ]; then
  echo "setup: the tests against PyTorch and the launcher tests will skip (missing $needs;" \
    "scripts/setup.sh --with-torch installs them)"
fi
shown=${builddir%/}/
if [ -f "$builddir/build.ninja" ]; then
  if [ $# -gt 0 ]; then
    step "configuring $shown with $*" meson configure "$builddir" "$@"
    echo "setup: configured $shown with $* (log: $log; next: ninja -C $builddir)"
  else
    echo "setup: $shown is configured (run: ninja -C $builddir)"
  fi
else
  step "configuring $shown" meson setup "$builddir" "$@"
  mv -f "$log" "$builddir/setup.log"
  log=$builddir/setup.log
  echo "setup: configured $shown (log: $log; next: ninja -C $builddir)"
fi
