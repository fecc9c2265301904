#!/usr/bin/env bash
# End-to-end on a kind cluster: build the image, install the chart, run the simulated example
# Batch, force-delete the worker holding a lease mid-job (no graceful release), and check the
# operator reclaims that job and the Batch still completes.
#
#   tests/e2e/kind/run.sh          (or: make e2e-kind)
#
# Needs docker with a reachable daemon and kind; otherwise prints one line and exits 0.
# helm and kubectl come from hack/k8s-tools/build.sh. Environment:
#   RECALL_KIND_CLUSTER   cluster name (default recall-e2e)
#   KIND_NODE_IMAGE       node image (default: kind's; Kubernetes >= 1.32 is needed)
#   RECALL_E2E_KEEP=1     keep the cluster afterwards (its kubeconfig path is printed)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)

skip() { echo "e2e-kind: SKIPPED: $*"; exit 0; }
command -v docker >/dev/null 2>&1 || skip "docker is not installed"
command -v kind >/dev/null 2>&1 || skip "kind is not installed"
docker info >/dev/null 2>&1 || skip "docker cannot reach a daemon (is it running?)"

cluster=${RECALL_KIND_CLUSTER:-recall-e2e}
namespace=recall
release=recall
image=recall:e2e
batch=simulated
work=$(mktemp -d "${TMPDIR:-/tmp}/recall-e2e-kind.XXXXXX")
export KUBECONFIG="$work/kubeconfig"
created=false
passed=false

log() { printf '[e2e-kind %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

diagnostics() {
  log "FAILED: diagnostics follow"
  set +e
  kubectl get nodes -o wide
  kubectl -n "$namespace" get deployments,pods,batches,transcriptionjobs -o wide
  kubectl -n "$namespace" get batches.recall.dev "$batch" -o yaml
  kubectl -n "$namespace" get transcriptionjobs -o yaml | grep -E '^\s+(name|phase|holder|expiredLeases|attempts|chunksDone|lastError):'
  kubectl -n "$namespace" describe pods
  kubectl -n "$namespace" get events --sort-by=.lastTimestamp | tail -n 40
  for component in operator worker; do
    echo "--- logs of the $component pods"
    kubectl -n "$namespace" logs -l "app.kubernetes.io/component=$component" \
      --all-containers --prefix --tail=80
  done
  set -e
}

cleanup() {
  local rc=$?
  if [[ $passed != true && $created == true ]]; then diagnostics || true; fi
  if [[ $created == true ]]; then
    if [[ ${RECALL_E2E_KEEP:-0} == 1 ]]; then
      log "keeping cluster $cluster: export KUBECONFIG=$KUBECONFIG"
    else
      log "deleting cluster $cluster"
      kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
      rm -rf "$work"
    fi
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT

# wait_until SECONDS WHAT COMMAND...: run COMMAND every 2 s until it succeeds; fail after SECONDS.
wait_until() {
  local seconds=$1 what=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    if ((SECONDS >= deadline)); then
      log "timed out after ${seconds} s waiting for $what"
      return 1
    fi
    sleep 2
  done
}

# The project's helm and kubectl (built from Go modules and cached); those on PATH otherwise.
if tools=$("$root/hack/k8s-tools/build.sh"); then
  export PATH="$tools:$PATH"
elif ! command -v helm >/dev/null || ! command -v kubectl >/dev/null; then
  log "hack/k8s-tools/build.sh failed and helm or kubectl is not on PATH"
  exit 1
fi
kubectl version --client >/dev/null
helm version >/dev/null

log "building $image"
DOCKER_BUILDKIT=1 docker build -t "$image" "$root"

log "creating kind cluster $cluster"
if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  log "a cluster named $cluster exists already; set RECALL_KIND_CLUSTER to another name"
  exit 1
fi
created=true
kind create cluster --name "$cluster" --kubeconfig "$KUBECONFIG" --wait 180s \
  ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
kind load docker-image "$image" --name "$cluster"

log "installing the chart"
helm install "$release" "$root/charts/recall" --namespace "$namespace" --create-namespace \
  --values "$here/values.yaml" --wait --timeout 5m
kubectl -n "$namespace" get pods -o wide

log "submitting examples/batch-simulated.yaml"
kubectl -n "$namespace" apply -f "$root/examples/batch-simulated.yaml"
keys=$(kubectl -n "$namespace" get batches.recall.dev "$batch" -o jsonpath='{.spec.items[*].key}')
items=$(wc -w <<<"$keys" | tr -d ' ')

# Prints "<job> <holder>" of a job leased by a worker that has finished at least one chunk and
# has at least 5 left: a force-deleted pod still gets SIGTERM and, about 2 s later, SIGKILL from
# the kubelet; the worker keeps working through SIGTERM (its grace period is longer), so with
# chunks of 1 s the job cannot finish before the kill and its lease must be reclaimed.
leased_with_progress() {
  kubectl -n "$namespace" get transcriptionjobs -o \
    jsonpath='{range .items[*]}{.metadata.name} {.status.lease.holder} {.status.progress.chunksDone} {.status.progress.chunksTotal}{"\n"}{end}' |
    awk '$2 != "" && $3 + 0 >= 1 && $4 - $3 >= 5 { print $1, $2; exit }'
}
has_victim() { [[ -n $(leased_with_progress) ]]; }
wait_until 240 "a worker holding a lease with progress" has_victim
read -r job victim < <(leased_with_progress)
log "job $job is leased by $victim with progress; force-deleting that pod (no graceful release)"
kubectl -n "$namespace" delete pod "$victim" --grace-period=0 --force --wait=false

expired() {
  local n
  n=$(kubectl -n "$namespace" get transcriptionjob "$job" -o jsonpath='{.status.expiredLeases}')
  [[ ${n:-0} -ge 1 ]]
}
lease=$(kubectl -n "$namespace" get transcriptionjob "$job" -o jsonpath='{.spec.leaseDurationSeconds}')
wait_until $((lease + 60)) "the operator to reclaim $job (status.expiredLeases >= 1)" expired
log "reclaimed: $job has status.expiredLeases=$(kubectl -n "$namespace" get transcriptionjob "$job" -o jsonpath='{.status.expiredLeases}')"

log "waiting for batch $batch to complete"
kubectl -n "$namespace" wait --for=condition=Complete "batches.recall.dev/$batch" --timeout=300s
read -r total completed failed < <(kubectl -n "$namespace" get batches.recall.dev "$batch" \
  -o jsonpath='{.status.counts.total} {.status.counts.completed} {.status.counts.failed}{"\n"}')
kubectl -n "$namespace" get batches.recall.dev "$batch"
kubectl -n "$namespace" get transcriptionjobs -o wide
if [[ $total != "$items" || $completed != "$items" || ${failed:-0} != 0 ]]; then
  log "counts wrong: total=$total completed=$completed failed=${failed:-0}, want $items/$items/0"
  exit 1
fi
holder=$(kubectl -n "$namespace" get transcriptionjob "$job" -o jsonpath='{.status.result.worker}')
if [[ -z $holder || $holder == "$victim" ]]; then
  log "job $job was completed by '${holder}', not by a surviving worker"
  exit 1
fi
passed=true
log "PASSED: $victim was killed mid-job, $job was reclaimed and finished by $holder; $completed/$total items completed"
