#!/usr/bin/env bash
# Makes sure a Docker-compatible engine answers and holds the local busybox
# test image, then prints the variables the tests read.
#
#   eval "$(scripts/prepare-engine.sh)"
#
# Uses the Docker engine at $DOCKER_HOST or /var/run/docker.sock when one
# answers (unless KNOTLESS_ENGINE=podman); otherwise installs Debian's podman and serves its Docker API on a
# socket of its own. No registry is reachable here, so the image is built
# from Debian's busybox-static: /bin/busybox, its applet links, /etc/passwd
# and /tmp, imported as $KNOTLESS_TEST_IMAGE (default knotless-busybox:local).
set -euo pipefail

IMAGE="${KNOTLESS_TEST_IMAGE:-knotless-busybox:local}"
STATE="${KNOTLESS_ENGINE_STATE:-${TMPDIR:-/tmp}/knotless-engine}"
mkdir -p "$STATE"

say() { echo "prepare-engine: $*" >&2; }
die() { say "$*"; exit 1; }

apt_install() {
  if ! command -v apt-get >/dev/null; then
    die "need $* but apt-get is not available; install them by hand"
  fi
  if [ ! -f "$STATE/.apt-updated" ]; then
    apt-get update -qq >&2 && touch "$STATE/.apt-updated"
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
}

# Answers if the engine at $1 (a unix:// URL) serves the Docker API.
engine_answers() {
  local sock="${1#unix://}"
  [ -S "$sock" ] || return 1
  curl -fsS --max-time 5 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1
}

command -v curl >/dev/null || apt_install curl ca-certificates
# The tenant tests issue certificates as a cluster admin would.
command -v openssl >/dev/null || apt_install openssl
# The registry-credentials test pulls from a real registry that needs a
# login (Debian's docker-registry, with an htpasswd file made by htpasswd).
# Debian's package would start one as a service where systemd runs; the
# test starts its own, on a port of its own.
{ command -v docker-registry >/dev/null && command -v htpasswd >/dev/null; } || apt_install docker-registry apache2-utils

# KNOTLESS_ENGINE=podman skips an existing Docker engine, to test on podman.
WANT="${KNOTLESS_ENGINE:-auto}"
HOST=""
ENGINE=""
if [ "$WANT" != podman ]; then
  if [ -n "${DOCKER_HOST:-}" ] && engine_answers "$DOCKER_HOST"; then
    HOST="$DOCKER_HOST"
  elif engine_answers unix:///var/run/docker.sock; then
    HOST="unix:///var/run/docker.sock"
  fi
fi

if [ -n "$HOST" ]; then
  ENGINE="docker"
else
  ENGINE="podman"
  SOCK="$STATE/podman.sock"
  HOST="unix://$SOCK"
  if ! engine_answers "$HOST"; then
    command -v podman >/dev/null || apt_install podman runc conmon netavark catatonit
    # Facts of these machines: crun fails on the hybrid cgroup layout, there
    # is no systemd, and ulimits may not exceed the hard limits.
    nofile="$(ulimit -Hn)"; [ "$nofile" = unlimited ] && nofile=1048576
    nproc="$(ulimit -Hu)"; { [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; } && nproc=32768
    cat >"$STATE/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
    cat >"$STATE/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$STATE/storage"
runroot = "$STATE/run"
CONF
    export CONTAINERS_CONF="$STATE/containers.conf" CONTAINERS_STORAGE_CONF="$STATE/storage.conf"
    say "starting podman's Docker API on $SOCK"
    nohup podman system service --time=0 "$HOST" >"$STATE/podman.log" 2>&1 &
    for _ in $(seq 1 300); do
      engine_answers "$HOST" && break
      # Waiting for a socket another process creates: there is no event to wait on.
      sleep 0.1
    done
    engine_answers "$HOST" || die "podman did not answer on $SOCK; see $STATE/podman.log"
  fi
fi
SOCK="${HOST#unix://}"
say "engine: $ENGINE at $HOST"

image_present() {
  curl -fsS --max-time 10 --unix-socket "$SOCK" "http://d/images/$IMAGE/json" >/dev/null 2>&1
}

# Fills the folder $2 with the busybox $1, a link for each applet (the
# host's busybox lists them: the arm64 build is the same Debian version),
# /etc/passwd and /etc/group with root and nobody, and /tmp.
busybox_rootfs() {
  mkdir -p "$2/bin" "$2/etc" "$2/tmp" "$2/root"
  chmod 1777 "$2/tmp"
  cp "$1" "$2/bin/busybox"
  for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$2/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/tmp:/bin/sh\n' >"$2/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$2/etc/group"
}

if ! image_present; then
  [ -x /bin/busybox ] && /bin/busybox --list >/dev/null 2>&1 || apt_install busybox-static
  ROOTFS="$(mktemp -d "$STATE/rootfs.XXXXXX")"
  trap 'rm -rf "$ROOTFS"' EXIT
  busybox_rootfs /bin/busybox "$ROOTFS"
  say "importing $IMAGE from busybox-static"
  imported="$(tar -C "$ROOTFS" -cf - . | curl -fsS --unix-socket "$SOCK" -X POST \
    -H 'Content-Type: application/x-tar' --data-binary @- \
    "http://d/images/create?fromSrc=-&repo=${IMAGE%:*}&tag=${IMAGE##*:}&changes=ENV%20PATH%3D%2Fbin")"
  if ! image_present; then
    # podman's import ignores the tag: tag the imported image by its id.
    id="$(printf '%s' "$imported" | grep -o 'sha256:[0-9a-f]\{64\}' | tail -n 1)"
    [ -n "$id" ] || die "the engine's import answer names no image: $imported"
    curl -fsS --unix-socket "$SOCK" -X POST \
      "http://d/images/$id/tag?repo=${IMAGE%:*}&tag=${IMAGE##*:}" >/dev/null
  fi
  image_present || die "the image $IMAGE is not on the engine after import"
fi

# An arm64 image of the same busybox, run under qemu (issue 56), where
# this machine runs aarch64 programs.
"$(dirname "$0")/prepare-toolchain.sh"
IMAGE_ARM64="${KNOTLESS_TEST_IMAGE_ARM64:-knotless-busybox-arm64:local}"
arm64_present() {
  curl -fsS --max-time 10 --unix-socket "$SOCK" "http://d/images/$IMAGE_ARM64/json" >/dev/null 2>&1
}
if ! arm64_present && [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  ARMROOT="$(mktemp -d "$STATE/rootfs-arm64.XXXXXX")"
  DEB="$(mktemp -d "$STATE/deb-arm64.XXXXXX")"
  if (cd "$DEB" && apt-get download busybox-static:arm64 >/dev/null 2>&1); then
    dpkg-deb -x "$DEB"/busybox-static_*_arm64.deb "$DEB/x"
    busybox_rootfs "$DEB/x/bin/busybox" "$ARMROOT"
    say "importing $IMAGE_ARM64 from busybox-static:arm64"
    tar -C "$ARMROOT" -cf - . | curl -fsS --unix-socket "$SOCK" -X POST \
      -H 'Content-Type: application/x-tar' --data-binary @- \
      "http://d/images/create?fromSrc=-&repo=${IMAGE_ARM64%:*}&tag=${IMAGE_ARM64##*:}&changes=ENV%20PATH%3D%2Fbin&platform=linux/arm64" >/dev/null \
      || say "could not import $IMAGE_ARM64"
  else
    say "could not download busybox-static:arm64: the arm64 tests are left out"
  fi
  rm -rf "$ARMROOT" "$DEB"
fi

echo "export DOCKER_HOST=$HOST"
echo "export KNOTLESS_TEST_IMAGE=$IMAGE"
echo "export KNOTLESS_TEST_ENGINE=$ENGINE"
if arm64_present; then
  echo "export KNOTLESS_TEST_IMAGE_ARM64=$IMAGE_ARM64"
else
  echo "export KNOTLESS_TEST_IMAGE_ARM64="
fi
