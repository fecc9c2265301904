#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl, etcd, helm,
# kube-score and the node's pause binary from Go modules and caches them outside the
# repository. Prints the bin directory on stdout when done.
#
#   hack/k8s-tools/build.sh            build what is missing, print the bin directory
#   hack/k8s-tools/build.sh --print    print the bin directory only (no build)
#   hack/k8s-tools/build.sh --with-kind  also build kind (for `make e2e-kind` only)
#
# Cache: ${RECALL_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/recall}/k8s-v<kube>-etcd-v<etcd>-helm-v<helm>/bin
# A binary is rebuilt only when it is missing; VERSIONS in the bin directory records what
# was built with which Go. Progress goes to stderr, one line per step.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

cache_root=${RECALL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/recall}
bin="$cache_root/k8s-v$KUBE_VERSION-etcd-v$ETCD_VERSION-helm-v$HELM_VERSION/bin"
if [[ "${1:-}" == "--print" ]]; then echo "$bin"; exit 0; fi
mkdir -p "$bin"
# One build at a time per cache directory (tests and `make` may start it concurrently).
exec 9>"$bin/.lock"
flock 9

command -v go >/dev/null || { echo "build.sh: Go is required (https://go.dev/dl)" >&2; exit 1; }
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath"
ldflags="-s -w"

progress() { printf '[k8s-tools] %s\n' "$*" >&2; }

# build <module dir> <package> <binary> [extra ldflags]
build() {
  local dir=$1 pkg=$2 out=$3 extra=${4:-}
  if [[ -x "$bin/$out" ]]; then return 0; fi
  progress "building $out ($pkg) ... (a first build takes several minutes)"
  local start=$SECONDS
  (cd "$here/$dir" && go build -ldflags "$ldflags $extra" -o "$bin/$out.tmp" "$pkg")
  mv "$bin/$out.tmp" "$bin/$out"
  progress "built $out in $((SECONDS - start)) s"
  printf '%s %s %s\n' "$out" "$pkg" "$(go env GOVERSION)" >> "$bin/VERSIONS"
}

# kube-apiserver and kubectl report their version from these variables.
kv="k8s.io/component-base/version"
kube_minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
kube_ldflags="-X $kv.gitVersion=v$KUBE_VERSION -X $kv.gitMajor=1 -X $kv.gitMinor=$kube_minor"
kube_ldflags="$kube_ldflags -X $kv.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=v$KUBE_VERSION"

build etcd . etcd
build kube k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$kube_ldflags"
build kube k8s.io/kubernetes/cmd/kubectl kubectl "$kube_ldflags"
build kube k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager "$kube_ldflags"
# The node of `recall dev up --node` (dev/recall_dev/node.py).
build kube k8s.io/kubernetes/cmd/kube-scheduler kube-scheduler "$kube_ldflags"
build kube k8s.io/kubernetes/cmd/kubelet kubelet "$kube_ldflags"
build ../node/pause . pause
# The chart linter of `make chart-lint` (kube-linter and Polaris are not served by the Go
# module proxy this project can reach; see hack/chart-lint.sh).
build kube-score github.com/zegl/kube-score/cmd/kube-score kube-score "-X main.version=v$KUBE_SCORE_VERSION"
if [[ "${1:-}" == "--with-kind" ]]; then build kind sigs.k8s.io/kind kind; fi
build helm helm.sh/helm/v3/cmd/helm helm "-X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION"

echo "$bin"
