#!/usr/bin/env bash
# Regenerates requirements.lock: the image's Python dependencies (pyproject.toml's
# [project].dependencies, no extras), every version pinned, every file's sha256 listed; and
# requirements-cuda.lock: what the CUDA variant adds (requirements-cuda.in), the same way; and
# requirements-multilingual.lock: the multilingual variants' model wheels
# (requirements-multilingual.in).
#
#   hack/image/lock.sh              re-resolve from pyproject.toml, keeping current pins
#   hack/image/lock.sh --upgrade    take the newest versions allowed
#
# Resolved for the image's platform: CPython 3.11 on Linux x86_64 (run it on such a host, as
# CI's is; environment markers are evaluated here). pip-tools runs from its own virtualenv in
# the cache, never from the project's.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PIP_TOOLS_VERSION=7.6.2
cache_root=${RECALL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/recall}
tool_venv="$cache_root/pip-tools-$PIP_TOOLS_VERSION"
if [[ ! -x "$tool_venv/bin/pip-compile" ]]; then
  python3 -m venv "$tool_venv"
  "$tool_venv/bin/pip" install --quiet "pip-tools==$PIP_TOOLS_VERSION"
fi
cd "$root"
"$tool_venv/bin/pip-compile" --quiet --generate-hashes --strip-extras --no-emit-index-url \
  --no-emit-find-links --resolver=backtracking "$@" \
  --output-file hack/image/requirements.lock pyproject.toml
"$tool_venv/bin/pip-compile" --quiet --generate-hashes --strip-extras --no-emit-index-url \
  --no-emit-find-links --resolver=backtracking "$@" \
  --output-file hack/image/requirements-cuda.lock hack/image/requirements-cuda.in
"$tool_venv/bin/pip-compile" --quiet --generate-hashes --strip-extras --no-emit-index-url \
  --no-emit-find-links --resolver=backtracking "$@" \
  --output-file hack/image/requirements-multilingual.lock hack/image/requirements-multilingual.in
