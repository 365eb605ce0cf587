#!/usr/bin/env bash
# Makes sure this machine can build the helpers for aarch64 and run
# aarch64 programs (issue 56), installing from Debian's packages what is
# missing; prints nothing on stdout, so prepare-engine.sh can call it.
#
#   - Debian's rustc (rustc-web, with the aarch64 core library of
#     libstd-rust-web-dev:arm64) and lld: executor-container's build.rs
#     builds each helper with it for aarch64 (rustup's toolchain stays
#     first on PATH for the workspace);
#   - qemu-user-static with binfmt_misc: an aarch64 program, and an arm64
#     image's container, runs here under emulation.
#
# Where apt-get is missing or cannot install, it says so and goes on: the
# build then warns that the aarch64 helpers are missing (an error under
# KNOTLESS_REQUIRE_HELPERS=1) and the arm64 tests are ignored.
set -uo pipefail

say() { echo "prepare-toolchain: $*" >&2; }
STATE="${KNOTLESS_ENGINE_STATE:-${TMPDIR:-/tmp}/knotless-engine}"
mkdir -p "$STATE"

command -v apt-get >/dev/null || { say "no apt-get: install rustc-web, libstd-rust-web-dev:arm64, lld and qemu-user-static by hand"; exit 0; }

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for pkg in rustc-web libstd-rust-web-dev:arm64 lld qemu-user-static binfmt-support; do
  installed "$pkg" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
  if [ ! -f "$STATE/.apt-updated-arm64" ]; then
    apt-get update -qq >&2 && touch "$STATE/.apt-updated-arm64" "$STATE/.apt-updated"
  fi
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2 \
    || say "could not install ${missing[*]}: the aarch64 helpers and tests are left out"
fi

# binfmt_misc lets the kernel hand an aarch64 ELF to qemu; the F flag of
# Debian's registration keeps it working inside containers.
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null \
    || say "cannot mount binfmt_misc: aarch64 programs will not run here"
fi
if [ -e /proc/sys/fs/binfmt_misc/register ] && [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  update-binfmts --enable qemu-aarch64 >&2 2>/dev/null || say "cannot enable qemu-aarch64 in binfmt_misc"
fi
exit 0
