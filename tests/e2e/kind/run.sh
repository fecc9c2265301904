#!/usr/bin/env bash
# The pod end-to-end tests (tests/e2e/pods) on a kind cluster instead of the local node.
#
#   tests/e2e/kind/run.sh          (or: make e2e-kind)
#
# Where a Docker daemon answers and can pull (or already has) kind's node image: builds the
# image from the Dockerfile (recall_dev.image, on that daemon), creates a kind cluster whose
# node mounts a media directory at the same path, loads the image, and runs the same pytest
# tests as `make e2e` with RECALL_E2E_CLUSTER=kind. Where it cannot, it prints ONE line saying
# why and exits 0. kind is built from its Go module (hack/k8s-tools/build.sh --with-kind),
# helm and kubectl come from the same place. Environment:
#   RECALL_KIND_CLUSTER   cluster name (default recall-e2e)
#   KIND_NODE_IMAGE       node image (default: the one this kind release names)
#   RECALL_E2E_KEEP=1     keep the cluster afterwards (its kubeconfig path is printed)
#   PYTEST_ARGS           more pytest arguments
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
py="$root/.venv/bin/python"
skip() { echo "e2e-kind: SKIPPED: $*"; exit 0; }

command -v docker >/dev/null 2>&1 || skip "docker is not installed"
docker info >/dev/null 2>&1 || skip "no Docker daemon answers (kind needs one with networking)"
tools=$("$root/hack/k8s-tools/build.sh" --with-kind 2>/dev/null) || skip "kind could not be built"
export PATH="$tools:$PATH"
node_image=${KIND_NODE_IMAGE:-$(kind version -q >/dev/null 2>&1 && kind create cluster --help |
  sed -n 's/.*--image string.*default "\([^"]*\)".*/\1/p' | head -n1)}
if [[ -z $node_image ]]; then node_image=kindest/node; fi
if ! docker image inspect "$node_image" >/dev/null 2>&1 &&
  ! docker pull --quiet "$node_image" >/dev/null 2>&1; then
  skip "Docker cannot pull kind's node image $node_image (no registry reachable)"
fi

cluster=${RECALL_KIND_CLUSTER:-recall-e2e}
work=$(mktemp -d "${TMPDIR:-/tmp}/recall-e2e-kind.XXXXXX")
media="$work/media"
mkdir -m 0755 "$media"
export KUBECONFIG="$work/kubeconfig"
created=false
log() { printf '[e2e-kind %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

cleanup() {
  local rc=$?
  if [[ $created == true && ${RECALL_E2E_KEEP:-0} == 1 ]]; then
    log "keeping cluster $cluster: export KUBECONFIG=$KUBECONFIG"
  else
    if [[ $created == true ]]; then kind delete cluster --name "$cluster" >/dev/null 2>&1 || true; fi
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT

if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  log "a cluster named $cluster exists already; set RECALL_KIND_CLUSTER to another name"
  exit 1
fi
log "building the image"
"$py" -m recall_dev.image build --tag recall.local/recall:dev >/dev/null

log "creating kind cluster $cluster ($node_image)"
cat >"$work/kind.yaml" <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
    extraMounts:
      - hostPath: $media
        containerPath: $media
        readOnly: true
EOF
created=true
kind create cluster --name "$cluster" --image "$node_image" --config "$work/kind.yaml" \
  --kubeconfig "$KUBECONFIG" --wait 180s
kind load docker-image recall.local/recall:dev --name "$cluster"

log "running tests/e2e/pods on kind"
# shellcheck disable=SC2086
RECALL_E2E_CLUSTER=kind RECALL_E2E_MEDIA_DIR="$media" RECALL_E2E_KIND_NODE="$cluster-control-plane" \
  "$py" -m pytest "$root/tests/e2e/pods" ${PYTEST_ARGS:-}
