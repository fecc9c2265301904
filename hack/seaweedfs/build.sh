#!/usr/bin/env bash
# Builds SeaweedFS's `weed` (the dev and test S3 server) from its Go module and caches it
# outside the repository. Prints the bin directory on stdout when done.
#
#   hack/seaweedfs/build.sh            build weed if it is missing, print the bin directory
#   hack/seaweedfs/build.sh --print    print the bin directory only (no build)
#
# Cache: ${RECALL_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/recall}/seaweedfs-<module version>/bin
# The version is the one go.mod beside this script requires; changing it changes the cache
# directory, so the next build starts fresh. weed is rebuilt only when it is missing; VERSIONS
# in the bin directory records what was built with which Go. A build prints one line on
# stderr (what, how long); its full log stays in build-weed.log beside bin/, and a failure
# prints that path. A first build takes about 10 CPU-minutes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
module=github.com/seaweedfs/seaweedfs
version=$(awk -v m="$module" '$1 == "require" && $2 == m { print $3 }' "$here/go.mod")
[[ -n "$version" ]] || { echo "build.sh: no 'require $module' line in $here/go.mod" >&2; exit 1; }

cache_root=${RECALL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/recall}
bin="$cache_root/seaweedfs-$version/bin"
if [[ "${1:-}" == "--print" ]]; then echo "$bin"; exit 0; fi
mkdir -p "$bin"
# One build at a time per cache directory (tests and `make` may start it concurrently).
exec 9>"$bin/.lock"
flock 9

if [[ ! -x "$bin/weed" ]]; then
  command -v go >/dev/null || { echo "build.sh: Go is required (https://go.dev/dl)" >&2; exit 1; }
  log="$(dirname "$bin")/build-weed.log"
  start=$SECONDS
  # A static binary (CGO off), so the image can hold weed alone.
  if ! (cd "$here" && CGO_ENABLED=0 go build -ldflags "-s -w" -trimpath \
          -o "$bin/weed.tmp" "$module/weed") >"$log" 2>&1; then
    echo "[seaweedfs] building weed ($module@$version) failed after $((SECONDS - start)) s; log: $log" >&2
    exit 1
  fi
  mv "$bin/weed.tmp" "$bin/weed"
  printf 'weed %s@%s %s\n' "$module" "$version" "$(go env GOVERSION)" >> "$bin/VERSIONS"
  echo "[seaweedfs] built weed ($module@$version) in $((SECONDS - start)) s" >&2
fi
echo "$bin"
