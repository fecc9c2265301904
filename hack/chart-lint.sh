#!/usr/bin/env bash
# Lints charts/recall: `helm lint --strict`, then kube-score over the rendered manifests, with
# the defaults, with every opt-in on (chart-lint/values-everything.yaml), and with every opt-in
# and the hostPath model cache (chart-lint/values-hostpath.yaml on top). Exceptions, each with
# its reason, are in chart-lint/kube-score.ignore (and, for the defaults only, in
# chart-lint/kube-score-defaults.ignore: the opt-in features; for the hostPath rendering only,
# in chart-lint/kube-score-hostpath.ignore: its root init container). Exits non-zero on any
# finding.
#
#   hack/chart-lint.sh          (or: make chart-lint)
#
# kube-linter and Polaris are served by no Go module proxy or package registry this project
# reaches, so they are not run here; hack/chart-lint/README.md has what a one-off run of each
# found and what became of it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bin=$("$here/k8s-tools/build.sh")
chart="$root/charts/recall"
ignored() { grep -h -v -e '^#' -e '^$' "$@" | paste -sd, -; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export HELM_CACHE_HOME="$work/cache" HELM_CONFIG_HOME="$work/config" HELM_DATA_HOME="$work/data"

"$bin/helm" lint --strict "$chart" >/dev/null
"$bin/helm" lint --strict "$chart" -f "$here/chart-lint/values-everything.yaml" >/dev/null
"$bin/helm" lint --strict "$chart" -f "$here/chart-lint/values-everything.yaml" \
  -f "$here/chart-lint/values-hostpath.yaml" >/dev/null
for variant in defaults everything hostpath; do
  args=()
  ignore=$(ignored "$here/chart-lint/kube-score.ignore" "$here/chart-lint/kube-score-defaults.ignore")
  if [[ $variant == everything ]]; then
    args=(-f "$here/chart-lint/values-everything.yaml")
    ignore=$(ignored "$here/chart-lint/kube-score.ignore")
  elif [[ $variant == hostpath ]]; then
    args=(-f "$here/chart-lint/values-everything.yaml" -f "$here/chart-lint/values-hostpath.yaml")
    ignore=$(ignored "$here/chart-lint/kube-score.ignore" "$here/chart-lint/kube-score-hostpath.ignore")
  fi
  "$bin/helm" template recall "$chart" --namespace recall "${args[@]}" >"$work/$variant.yaml"
  if ! "$bin/kube-score" score "$work/$variant.yaml" --output-format ci \
      --ignore-test "$ignore" >"$work/$variant.score"; then
    grep -v -e '^\[OK\]' -e '^\[SKIPPED\]' "$work/$variant.score" >&2
    echo "chart-lint: kube-score found problems in the chart ($variant values)" >&2
    exit 1
  fi
done
echo "chart-lint: helm lint and kube-score passed (defaults, every opt-in on, the hostPath cache)"
