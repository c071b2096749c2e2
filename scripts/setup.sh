#!/usr/bin/env bash
# Installs what dpscale needs to build and plot (Debian packages, only those
# missing) and configures a Meson build folder. Idempotent: a configured
# folder is left as it is.
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
if [ "$with_torch" = 1 ]; then
  /usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 || missing+=(python3-numpy)
  /usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || missing+=(python3-torch)
  /usr/bin/python3 -c 'import torchvision' >/dev/null 2>&1 || missing+=(python3-torchvision)
  command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin) # the launcher tests' mpirun
  command -v mpicc >/dev/null 2>&1 || missing+=(libopenmpi-dev) # scripts/allreduce_vs_mpi.sh
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || {
      echo "setup: need root to install ${missing[*]}: run as root or install them with apt-get" >&2
      exit 1
    }
    sudo=sudo
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ -f "$builddir/build.ninja" ]; then
  if [ $# -gt 0 ]; then
    meson configure "$builddir" "$@"
  fi
  echo "setup: $builddir is configured (run: ninja -C $builddir)"
else
  meson setup "$builddir" "$@"
fi
