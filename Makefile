# ctxdb: `make run` runs the main job on the embedded Elasticsearch node, `make test` the suite.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# The embedded node's HTTP port; ELASTICSEARCH_URL from the environment wins (external cluster).
ES_PORT ?= $(or $(CTXDB_ES_PORT),9200)
export CTXDB_ES_PORT := $(ES_PORT)
ELASTICSEARCH_URL ?= http://127.0.0.1:$(ES_PORT)
export ELASTICSEARCH_URL

# The embedding model ships inside a Python package: never reach for the Hugging Face hub.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export DAGSTER_HOME := $(CURDIR)/.dagster_home

PYTEST_ARGS ?=
DAGSTER_PORT ?= 3000

.PHONY: help install venv run test test-cluster es-start es-stop es-status es-logs validate dagster-dev

help:
	@echo "make run          install, start Elasticsearch, run the main job"
	@echo "make test         install, start Elasticsearch, run the test suite"
	@echo "make test-cluster install, run tests/cluster on a 3-node cluster, moto S3 and Redis"
	@echo "make dagster-dev  open the Dagster UI on http://127.0.0.1:$(DAGSTER_PORT) (DAGSTER_PORT=...)"
	@echo "make es-start | es-stop | es-status | es-logs | validate | install"

install venv: $(STAMP)

# cargo (rustup's default place included) builds the native landing scanner during the install.
export PATH := $(PATH):$(HOME)/.cargo/bin

# Reruns when pyproject.toml or the native scanner (its generated contract.json included) changes;
# pip's cache serves torch again.
$(STAMP): pyproject.toml native/Cargo.toml $(wildcard native/src/*.rs native/src/*.json)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

$(DAGSTER_HOME)/dagster.yaml: dagster.yaml
	@mkdir -p $(DAGSTER_HOME)
	@ln -sf ../dagster.yaml $@

es-start: $(STAMP)
	$(BIN)/ctxdb es start

es-stop: $(STAMP)
	$(BIN)/ctxdb es stop

es-status: $(STAMP)
	$(BIN)/ctxdb es status

es-logs: $(STAMP)
	$(BIN)/ctxdb es logs

run: es-start $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/python -m pipelines.demo

# Lint first (ruff), then type-check (mypy; both configured in pyproject.toml), then the native
# scanner's own Rust tests (when cargo is there); pytest exit 5 (no tests collected) is reported
# and fails like any other.
test: es-start
	$(BIN)/ruff check --quiet .
	$(BIN)/mypy
	@if command -v cargo >/dev/null; then \
		cargo test --quiet --release --manifest-path native/Cargo.toml; \
	else echo "cargo not found: the native scanner's Rust tests are skipped" >&2; fi
	@status=0; $(BIN)/pytest $(PYTEST_ARGS) || status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests" >&2; fi; exit $$status

# The cluster stack (tests/cluster, left out of `make test`): the session's fixtures start three
# Elasticsearch nodes, moto's S3 server and Debian's redis-server on free loopback ports and stop
# them at the end; the wall time is printed.
test-cluster: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	@command -v redis-server >/dev/null || \
		{ echo "redis-server not found: apt-get install -y redis-server" >&2; exit 1; }
	@started=$$(date +%s); status=0; $(BIN)/pytest tests/cluster $(PYTEST_ARGS) || status=$$?; \
	echo "make test-cluster: exit $$status after $$(( $$(date +%s) - started )) s"; exit $$status

validate: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/dagster definitions validate

dagster-dev: es-start $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/dagster dev --host 127.0.0.1 --port $(DAGSTER_PORT)
