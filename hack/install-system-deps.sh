#!/usr/bin/env bash
# Install the Debian packages the tests and benchmarks need, if they are missing.
#
#   espeak-ng     synthesizes the known English speech the Whisper accuracy test transcribes.
#   pocketsphinx-testdata
#                 five LibriVox clips (Sense and Sensibility, public domain) with their
#                 transcription: the real speech the transcript tests and make bench compare
#                 recall with faster-whisper on.
#   redis-server  the Redis that `make bench` starts on a loopback port to measure Celery
#                 (bench/compare); the benchmark starts and stops its own server, the package's
#                 service is not used.
#   docker.io, debootstrap
#                 build the project's image (a private dockerd when none runs; a Debian base
#                 made with debootstrap where the official one cannot be pulled) and run the
#                 kind clusters (another private dockerd: recall_dev.docker, recall_dev.kind).
#   iptables, iproute2
#                 what dockerd runs in a kind node's namespace for Docker's resolver.
#
# Audio is decoded with PyAV (bundled FFmpeg libraries), so ffmpeg itself is not needed.
# Idempotent: prints nothing and changes nothing when everything is already installed.
# Uses sudo only when not running as root.
set -euo pipefail

#   --demo        only what `make demo` needs: espeak-ng.
packages=(espeak-ng pocketsphinx-testdata redis-server docker.io debootstrap iptables iproute2)
if [[ "${1:-}" == "--demo" ]]; then packages=(espeak-ng); fi

missing=()
for pkg in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
[ "${#missing[@]}" -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-system-deps: apt-get not found; install these packages by hand: ${missing[*]}" >&2
    exit 1
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "install-system-deps: not root and no sudo; install: ${missing[*]}" >&2
        exit 1
    fi
    sudo=(sudo)
fi

echo "install-system-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh container has no package lists; refresh them only when the install cannot find one.
if ! "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
