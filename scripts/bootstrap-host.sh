#!/usr/bin/env bash
# Prepare a Debian/Ubuntu build host (run as root, idempotent): the system
# packages the farm and its tests use, a running Docker engine, and aarch64
# emulation (qemu-user-static registered with binfmt_misc, F flag) so that
# linux_aarch64 specs build in arm64 containers on an x86_64 host.
set -euo pipefail

packages=(docker.io debootstrap chromium binutils)
[ "$(uname -m)" = x86_64 ] && packages+=(qemu-user-static)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}"
  apt-get update -qq -o DPkg::Lock::Timeout=300
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${missing[@]}" >/dev/null
fi

# Start the Docker engine unless one already answers.
if ! docker info >/dev/null 2>&1; then
  echo "bootstrap: starting dockerd"
  # A dockerd killed with its session leaves pid files that would stop a new one.
  pgrep -x dockerd >/dev/null || rm -f /var/run/docker.pid /var/run/docker/containerd/containerd.pid
  mkdir -p /var/log
  nohup dockerd >/var/log/dockerd.log 2>&1 &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || { echo "bootstrap: dockerd did not start; see /var/log/dockerd.log" >&2; tail -20 /var/log/dockerd.log >&2; exit 1; }
fi
echo "bootstrap: docker engine $(docker version --format '{{.Server.Version}}') is up"

# aarch64 under emulation: register qemu-aarch64 with the F (fix-binary) flag, so that arm64
# containers run with no qemu inside them. When it cannot be done, say why in one line and go
# on: the farm then refuses linux_aarch64 builds on this host with the same reason.
aarch64_emulation() {
  local dir=/proc/sys/fs/binfmt_misc conf=/usr/lib/binfmt.d/qemu-aarch64.conf
  [ "$(uname -m)" = x86_64 ] || return 0
  if [ -r "$dir/qemu-aarch64" ] && grep -q '^enabled' "$dir/qemu-aarch64" && grep -q '^flags:.*F' "$dir/qemu-aarch64"; then
    echo "bootstrap: aarch64 emulation is registered (qemu-user-static, F flag)"
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "bootstrap: aarch64 emulation not set up: not root (linux_aarch64 builds will be refused here)"
    return 0
  fi
  if [ ! -e "$dir/register" ] && ! mount -t binfmt_misc binfmt_misc "$dir" 2>/dev/null; then
    echo "bootstrap: aarch64 emulation not set up: binfmt_misc cannot be mounted at $dir (linux_aarch64 builds will be refused here)"
    return 0
  fi
  if [ ! -r "$conf" ]; then
    echo "bootstrap: aarch64 emulation not set up: $conf is missing (is qemu-user-static installed?)"
    return 0
  fi
  # A registration without the F flag (or disabled) is replaced by Debian's, which has it.
  [ -e "$dir/qemu-aarch64" ] && echo -1 > "$dir/qemu-aarch64"
  if ! grep -v '^$' "$conf" > "$dir/register" 2>/dev/null; then
    echo "bootstrap: aarch64 emulation not set up: the kernel refused the binfmt_misc registration (linux_aarch64 builds will be refused here)"
    return 0
  fi
  echo "bootstrap: aarch64 emulation registered (qemu-user-static $(dpkg-query -W -f='${Version}' qemu-user-static), F flag)"
}
aarch64_emulation
