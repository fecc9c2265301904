#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kubectl, etcd, helm and kube-score from Go
# modules and caches them outside the repository. Prints the bin directory on stdout when done.
#
#   hack/k8s-tools/build.sh              build what is missing, print the bin directory
#   hack/k8s-tools/build.sh --print      print the bin directory only (no build)
#   hack/k8s-tools/build.sh --control-plane
#                                        only what a local control plane runs: etcd,
#                                        kube-apiserver and kubectl (`make demo`; the
#                                        controller manager, helm and kube-score are the
#                                        tests')
#   hack/k8s-tools/build.sh --with-kind  also kind and what its node image holds: kubeadm,
#                                        kubelet, kube-scheduler, kube-proxy, the pause binary,
#                                        CoreDNS, etcd and local-path-provisioner (`make
#                                        e2e-kind`, `recall dev up --kind`, and the short kind
#                                        test of `make test`)
#
# Cache: ${RECALL_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/recall}/k8s-v<kube>-etcd-v<etcd>-helm-v<helm>/bin
# A binary is rebuilt only when it is missing; VERSIONS in the bin directory records what
# was built with which Go. Each build says one line on stderr, what it built and how long it
# took; go's own output (downloads, compiler messages) goes to logs/<binary>.log beside bin/,
# and a failed build prints that path and the log's last lines.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

cache_root=${RECALL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/recall}
bin="$cache_root/k8s-v$KUBE_VERSION-etcd-v$ETCD_VERSION-helm-v$HELM_VERSION/bin"
logs="$(dirname "$bin")/logs"
if [[ "${1:-}" == "--print" ]]; then echo "$bin"; exit 0; fi
mkdir -p "$bin" "$logs"
# One build at a time per cache directory (tests and `make` may start it concurrently).
exec 9>"$bin/.lock"
flock 9

command -v go >/dev/null || { echo "build.sh: Go is required (https://go.dev/dl)" >&2; exit 1; }
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath"
ldflags="-s -w"

say() { printf '[k8s-tools] %s\n' "$*" >&2; }

# build <module dir> <package> <binary> [extra ldflags]
build() {
  local dir=$1 pkg=$2 out=$3 extra=${4:-}
  if [[ -x "$bin/$out" ]]; then return 0; fi
  local start=$SECONDS log="$logs/$out.log" what=$pkg
  # A wrapper module's own main package: name the module it wraps.
  if [[ $pkg == . ]]; then what=$(sed -n 's/^require \([^ ]*\) .*/\1/p' "$here/$dir/go.mod" | head -n1); fi
  what=${what:-$(realpath --relative-to="$here/../.." "$here/$dir")}
  if ! (cd "$here/$dir" && go build -v -ldflags "$ldflags $extra" -o "$bin/$out.tmp" "$pkg") \
    >"$log" 2>&1; then
    say "FAILED to build $out ($what) after $((SECONDS - start)) s; full log: $log"
    tail -n 15 "$log" | sed 's/^/  | /' >&2
    rm -f "$bin/$out.tmp"
    exit 1
  fi
  mv "$bin/$out.tmp" "$bin/$out"
  printf '%s %s %s\n' "$out" "$pkg" "$(go env GOVERSION)" >> "$bin/VERSIONS"
  say "built $out ($what) in $((SECONDS - start)) s; log: $log"
}

# requires <module dir> <module> <version>: the module's go.mod pins what versions.env says.
requires() {
  if ! grep -Eq "^(require )?[[:space:]]*$2 v$3\$" "$here/$1/go.mod"; then
    say "$1/go.mod does not require $2 v$3 (versions.env): regenerate it (go mod tidy)"
    exit 1
  fi
}

# kube-apiserver and kubectl report their version from these variables.
kv="k8s.io/component-base/version"
kube_minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
kube_ldflags="-X $kv.gitVersion=v$KUBE_VERSION -X $kv.gitMajor=1 -X $kv.gitMinor=$kube_minor"
kube_ldflags="$kube_ldflags -X $kv.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=v$KUBE_VERSION"

build etcd . etcd
build kube k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$kube_ldflags"
build kube k8s.io/kubernetes/cmd/kubectl kubectl "$kube_ldflags"
if [[ "${1:-}" == "--control-plane" ]]; then echo "$bin"; exit 0; fi
build kube k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager "$kube_ldflags"
# The chart linter of `make chart-lint` (kube-linter and Polaris are not served by the Go
# module proxy this project can reach; see hack/chart-lint.sh).
build kube-score github.com/zegl/kube-score/cmd/kube-score kube-score "-X main.version=v$KUBE_SCORE_VERSION"
if [[ "${1:-}" == "--with-kind" ]]; then
  requires kind sigs.k8s.io/kind "$KIND_VERSION"
  requires coredns github.com/coredns/coredns "$KIND_COREDNS_VERSION"
  requires etcd-kind go.etcd.io/etcd/server/v3 "$KIND_ETCD_VERSION"
  requires local-path github.com/rancher/local-path-provisioner "$KIND_LOCAL_PATH_VERSION"
  build kind sigs.k8s.io/kind kind
  # The kind node image (dev/recall_dev/kind_image.py): kubeadm, the kubelet, the scheduler,
  # kube-proxy, the sandbox's pause and the images' CoreDNS and etcd, all with the version
  # kubeadm checks and names.
  build kube k8s.io/kubernetes/cmd/kubeadm kubeadm "$kube_ldflags"
  build kube k8s.io/kubernetes/cmd/kubelet kubelet "$kube_ldflags"
  build kube k8s.io/kubernetes/cmd/kube-scheduler kube-scheduler "$kube_ldflags"
  build ../kind/pause . pause
  build kube k8s.io/kubernetes/cmd/kube-proxy kube-proxy "$kube_ldflags"
  build coredns . "coredns-v$KIND_COREDNS_VERSION"
  build etcd-kind . "etcd-v$KIND_ETCD_VERSION"
  # The node image's StorageClass `standard`, as upstream kind's: a directory per claim, made
  # writable for any user, on the node the claim's pod runs on.
  build local-path github.com/rancher/local-path-provisioner "local-path-provisioner-v$KIND_LOCAL_PATH_VERSION"
fi
build helm helm.sh/helm/v3/cmd/helm helm "-X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION"

echo "$bin"
