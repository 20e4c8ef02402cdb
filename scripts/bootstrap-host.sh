#!/usr/bin/env bash
# Prepare a Debian/Ubuntu build host (run as root, idempotent): the system
# packages the farm and its tests use, and a running Docker engine.
set -euo pipefail

packages=(docker.io debootstrap chromium binutils)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
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
