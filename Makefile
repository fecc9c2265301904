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

.PHONY: help venv tools system-deps lint typecheck unit test demo bench chaos e2e-kind dev-up dev-down clean

help:
	@grep -E '^#' Makefile | head -5 | sed 's/^# \{0,1\}//'

$(STAMP): pyproject.toml dev/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "[venv] installing the project and its dev dependencies into $(VENV)"
	@$(PY) -m pip install --quiet --upgrade pip
	@$(PY) -m pip install --quiet -e '.[dev,bench]' -e dev
	@touch $@

venv: $(STAMP)

tools:
	@hack/k8s-tools/build.sh >/dev/null

system-deps:
	@hack/install-system-deps.sh

lint: venv
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check operator dev tests bench

typecheck: venv
	@$(VENV)/bin/mypy

unit: venv
	@$(PY) -m pytest -q tests/unit $(PYTEST_ARGS)

test: venv tools system-deps lint typecheck
	@$(PY) -m pytest tests $(PYTEST_ARGS)

demo: venv tools system-deps
	@$(PY) -m recall_dev.demo $(DEMO_ARGS)

bench: venv tools system-deps
	@$(PY) -m bench.run $(BENCH_ARGS)

# The long chaos runs, one per seed (a few minutes each); `make test` runs a short one.
CHAOS_SEEDS ?= 1,2,3
chaos: venv tools
	@RECALL_CHAOS_PROFILE=long RECALL_CHAOS_SEEDS=$(CHAOS_SEEDS) \
		$(PY) -m pytest -q -p no:cacheprovider tests/chaos/test_chaos.py $(PYTEST_ARGS)

e2e-kind: venv
	@tests/e2e/kind/run.sh

dev-up: venv tools
	@$(VENV)/bin/recall dev up

dev-down: venv
	@$(VENV)/bin/recall dev down

clean:
	rm -rf $(VENV) .recall-dev .pytest_cache .mypy_cache .ruff_cache *.egg-info
