# inferstream: the README's two commands are `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
PYTEST_ARGS ?=
# `make test` and `make test-integration` run the tests in TEST_WORKERS processes (pytest-xdist),
# one test file at a time each, each process with a broker of its own: an integration test
# mostly waits (group sessions, simulated models' jobs), so two of them share 2 cores well.
# TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= 2
IN_PARALLEL := -n $(TEST_WORKERS) --dist loadfile
# Bytecode caches (gitignored __pycache__) for src/ and tests/ even where the environment says
# PYTHONDONTWRITEBYTECODE: without them every test process and every role a test starts compiles
# the sources again, and pytest rewrites every test module's asserts (2 s of each collection).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help venv lint typecheck test test-unit test-integration chaos chaos-schedule chaos-storm chaos-coordinators demo bench scale-study kafka-jars registry-jar clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@rm -f $(VENV)/.installed-*; touch $@

venv: $(STAMP) ## create .venv and install inferstream with its test tools

kafka-jars: ## resolve the Apache Kafka jars from Maven Central (cached)
	ops/kafka/cluster classpath >/dev/null

registry-jar: ## fetch Apicurio Registry (its Quarkus fast-jar) from Maven Central (cached)
	ops/apicurio/registry build >/dev/null

lint: $(STAMP) ## ruff on everything (the extensionless ops/kafka/cluster launcher named)
	$(VENV)/bin/ruff check src tests ops ops/kafka/cluster examples

typecheck: $(STAMP) ## mypy --strict on src/ and ops/
	$(VENV)/bin/mypy

test: lint typecheck kafka-jars registry-jar ## lint, type check, then every test (unit, integration, chaos)
	$(PY) -m pytest $(IN_PARALLEL) $(PYTEST_ARGS)

test-unit: $(STAMP) ## the unit tests only (no broker)
	$(PY) -m pytest $(IN_PARALLEL) tests/unit $(PYTEST_ARGS)

test-integration: $(STAMP) kafka-jars registry-jar ## the tests against a real local broker
	$(PY) -m pytest $(IN_PARALLEL) tests/integration $(PYTEST_ARGS)

demo: $(STAMP) kafka-jars ## classify scikit-image's photos end to end on a local Kafka
	$(PY) ops/demo.py

SEEDS ?= 3 4 6
SECURITY ?= plaintext
chaos: $(STAMP) kafka-jars ## full-size chaos scenario (20,000 items, 3-broker cluster, SECURITY plaintext|sasl_ssl|ssl) for each of SEEDS
	set -e; for seed in $(SEEDS); do $(PY) -m tests.chaos.scenario --seed $$seed --items 20000 --security $(SECURITY); done

chaos-schedule: $(STAMP) kafka-jars ## issue 26's fault schedule (one controller, three workers, two worker kills, a pause, a broker kill) RUNS times (default 10)
	$(PY) -m tests.chaos.schedule_runs --runs $(or $(RUNS),10)

chaos-storm: $(STAMP) kafka-jars ## kill -9 and restart brokers for MINUTES (default 20) under back-to-back jobs
	$(PY) -m tests.chaos.broker_storm --minutes $(or $(MINUTES),20)

chaos-coordinators: $(STAMP) kafka-jars ## kill -9 the broker of a controller's coordinator KILLS times (default 50, ~25 s each); counts controller aborts
	$(PY) -m tests.chaos.coordinator_kills --kills $(or $(KILLS),50)

scale-study: $(STAMP) kafka-jars ## the scale study: 1 to 100 simulated nodes, outages, a mix (about 35 min; every job bounded by --job-timeout-s)
	$(PY) ops/bench/scale_study.py

bench: $(STAMP) kafka-jars ## benchmark P1: bare PyTorch loop against the pipeline
	$(PY) ops/bench/p1_pipeline.py

clean: ## stop local clusters started here and delete build and state files
	-ops/kafka/cluster stop --dir var/kafka
	-ops/kafka/cluster stop --dir var/demo-kafka
	rm -rf var .pytest_cache .mypy_cache .ruff_cache
