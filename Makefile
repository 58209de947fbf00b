# The one task runner. `make setup` is idempotent; every other target depends on it.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
PROTO_DEPS := .cache/protos
PROTO_FILES := $(shell find protos -name '*.proto' | sort)
# What `buf breaking` compares against: the previous commit by default.
BREAKING_AGAINST ?= HEAD~1

.PHONY: help venv protos-deps gen-deps install install-runtime models setup demo test test-fast lint fmt gen gen-into check-gen breaking bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s $$'\t'

# Each provisioning step is a target of its own so that the Dockerfile runs exactly these.
venv: ## create the virtualenv with the code generators
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet grpcio-tools==1.85.1 mypy-protobuf==5.1.0

protos-deps: ## fetch third-party protos (pinned, checksummed) into .cache/protos
	$(PY) -m service.provision protos

# Python code for the fetched third-party protos (our generated code imports it); never committed.
gen-deps:
	PATH=$(BIN):$$PATH $(PY) -m grpc_tools.protoc -I $(PROTO_DEPS) --python_out=generated --mypy_out=generated \
		$(PROTO_DEPS)/buf/validate/validate.proto
	touch generated/buf/__init__.py generated/buf/validate/__init__.py

install: ## install the project (editable) with its development tools
	$(PY) -m pip install --quiet -e '.[dev]'

install-runtime: ## install the project and its runtime dependencies only
	$(PY) -m pip install --quiet --no-cache-dir .

models: ## provision the default embedding model (pinned, checksummed)
	$(PY) -m service.provision models

$(VENV)/.installed: pyproject.toml
	$(MAKE) --no-print-directory venv protos-deps gen-deps install
	touch $@

setup: $(VENV)/.installed ## everything a fresh machine needs; idempotent
	$(MAKE) --no-print-directory protos-deps gen-deps models

# The single command that regenerates generated/ from protos/.
gen: setup ## regenerate generated/ from protos/
	$(MAKE) --no-print-directory gen-into OUT=generated

gen-into:
	rm -rf $(OUT)/ragagent && mkdir -p $(OUT)
	PATH=$(BIN):$$PATH $(PY) -m grpc_tools.protoc -I protos -I $(PROTO_DEPS) \
		--python_out=$(OUT) --grpc_python_out=$(OUT) --mypy_out=$(OUT) --mypy_grpc_out=$(OUT) \
		$(PROTO_FILES)
	touch $(OUT)/ragagent/__init__.py $(OUT)/ragagent/v1/__init__.py $(OUT)/ragagent/py.typed

check-gen: setup ## fail when generated/ is stale
	tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	$(MAKE) --no-print-directory gen-into OUT=$$tmp && \
	diff -r -x __pycache__ $$tmp/ragagent generated/ragagent && echo "generated/ is up to date"

lint: setup ## ruff, mypy --strict, buf lint/format/breaking
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy service
	$(BIN)/buf lint
	$(BIN)/buf format -d --exit-code protos
	$(MAKE) --no-print-directory breaking

# buf breaking against the protos of $(BREAKING_AGAINST); the fetched third-party protos are
# added to that tree so that it builds without the Buf Schema Registry.
breaking:
	@if ! git rev-parse --verify --quiet '$(BREAKING_AGAINST)^{commit}' >/dev/null \
		|| [ -z "$$(git ls-tree -r --name-only '$(BREAKING_AGAINST)' -- protos)" ]; then \
		echo "buf breaking: $(BREAKING_AGAINST) has no protos, nothing to compare"; exit 0; fi; \
	tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	git archive '$(BREAKING_AGAINST)' protos buf.yaml | tar -x -C $$tmp && \
	mkdir -p $$tmp/.cache && cp -r $(PROTO_DEPS) $$tmp/.cache/protos && \
	(cd $$tmp && $(CURDIR)/$(BIN)/buf build protos -o against.binpb) && \
	$(BIN)/buf build protos -o $$tmp/current.binpb && \
	$(BIN)/buf breaking $$tmp/current.binpb --against $$tmp/against.binpb --exclude-imports \
		--config '{"version": "v2", "breaking": {"use": ["FILE"]}}' && \
	echo "buf breaking: no breaking change against $(BREAKING_AGAINST)"

fmt: setup ## format Python and protos in place
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .
	$(BIN)/buf format -w protos

demo: setup ## the main job on embedded defaults: ingest docs/, serve, stream cited answers
	$(BIN)/ragagent demo --data-dir .cache/demo

test: setup ## the whole test suite
	$(BIN)/pytest -q

test-fast: setup ## tests without the slow ones
	$(BIN)/pytest -q -m 'not slow'

bench: setup ## benchmarks: figures and ratios against baselines measured in the same run
	$(PY) -m tests.bench

clean: ## remove caches (keeps .venv and the downloads)
	rm -rf .pytest_cache .mypy_cache .ruff_cache

# Clients in other languages (docs/clients.md). Neither target needs Python: the protos come
# from scripts/fetch-protos.sh, buf from .venv/bin/buf or PATH. A language whose toolchain is
# missing is skipped with what it lacks (Debian packages: scripts/build-clients.sh).
.PHONY: fetch-protos clients
fetch-protos: ## fetch the third-party protos without Python (same pins as protos-deps)
	scripts/fetch-protos.sh

clients: fetch-protos ## generate and compile the Go, Java and TypeScript example clients
	scripts/build-clients.sh
