#!/usr/bin/env bash
# Builds promtool (Prometheus) and dashboardlint (this module's Grafana dashboard linter) from
# their Go modules and caches them outside the repository. Prints the bin directory on stdout.
#
#   hack/monitoring/build.sh            build what is missing, print the bin directory
#   hack/monitoring/build.sh --print    print the bin directory only (no build)
#
# Cache: ${RECALL_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/recall}/monitoring-prometheus-<v>-sdk-<v>/bin
# The versions are the ones go.mod beside this script requires; changing one changes the cache
# directory. A binary is rebuilt only when missing (dashboardlint also when its source changed);
# VERSIONS in the bin directory records what was built with which Go. Each build prints one
# line on stderr (what, how long); go's output stays in logs/<binary>.log beside bin/, and a
# failure prints that path and the log's end.
# A first build takes about 10 CPU-minutes (promtool; 15 min on the shared 2-core machine).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prometheus=github.com/prometheus/prometheus
sdk=github.com/grafana/grafana-foundation-sdk/go
version() { awk -v m="$1" '($1 == m || ($1 == "require" && $2 == m)) { print $NF; exit }' "$here/go.mod"; }
prom_version=$(version "$prometheus")
sdk_version=$(version "$sdk")
[[ -n "$prom_version" && -n "$sdk_version" ]] || { echo "build.sh: $here/go.mod must require $prometheus and $sdk" >&2; exit 1; }

cache_root=${RECALL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/recall}
bin="$cache_root/monitoring-prometheus-$prom_version-sdk-$sdk_version/bin"
logs="$(dirname "$bin")/logs"
if [[ "${1:-}" == "--print" ]]; then echo "$bin"; exit 0; fi
mkdir -p "$bin" "$logs"
# One build at a time per cache directory (tests and `make` may start it concurrently).
exec 9>"$bin/.lock"
flock 9

command -v go >/dev/null || { echo "build.sh: Go is required (https://go.dev/dl)" >&2; exit 1; }
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath"

# build <package> <binary> <what> [extra ldflags]
build() {
  local pkg=$1 out=$2 what=$3 extra=${4:-}
  if [[ -x "$bin/$out" ]]; then return 0; fi
  local start=$SECONDS log="$logs/$out.log"
  if ! (cd "$here" && go build -ldflags "-s -w $extra" -o "$bin/$out.tmp" "$pkg") >"$log" 2>&1; then
    echo "[monitoring] FAILED to build $out ($what) after $((SECONDS - start)) s; full log: $log" >&2
    tail -n 15 "$log" | sed 's/^/  | /' >&2
    rm -f "$bin/$out.tmp"
    exit 1
  fi
  mv "$bin/$out.tmp" "$bin/$out"
  printf '%s %s %s\n' "$out" "$what" "$(go env GOVERSION)" >> "$bin/VERSIONS"
  echo "[monitoring] built $out ($what) in $((SECONDS - start)) s; log: $log" >&2
}

# promtool reports the module's version (v0.3xx.y is Prometheus 3.xx.y).
build "$prometheus/cmd/promtool" promtool "$prometheus@$prom_version" \
  "-X github.com/prometheus/common/version.Version=$prom_version"
# This module's own linter is rebuilt when its source changes (its digest is kept beside it).
digest=$(cat "$here/dashboardlint/main.go" "$here/go.sum" | sha256sum | cut -c1-16)
if [[ "$(cat "$bin/dashboardlint.digest" 2>/dev/null)" != "$digest" ]]; then rm -f "$bin/dashboardlint"; fi
build ./dashboardlint dashboardlint "$sdk@$sdk_version, $prometheus@$prom_version"
echo "$digest" > "$bin/dashboardlint.digest"
echo "$bin"
