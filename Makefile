# The developer commands: README.md's two commands and .ci/run use them (README.md, "Tests").
# Run `make setup` once (or `make venv` to build only); each target then uses the project's virtualenv.
PYTHON := .venv/bin/python

.PHONY: venv setup generate check lint test test-live all

venv:  # the virtualenv with hpcobs installed editable: enough to build
	python3 -m venv .venv
	$(PYTHON) -m pip install -e .

setup: venv  # plus the test extras (pytest, ruff, mypy, import-linter), the training helper, the pinned LogQL and TraceQL parsers and the preview page
	$(PYTHON) -m pip install -e '.[test]'
	$(PYTHON) -m pip install -e './instrumentation[otel]'
	npm ci --prefix tests/logql
	npm ci --prefix tests/traceql
	npm ci --prefix preview
	npm run build --prefix preview

generate:  # every generated file: the settings files from the threshold declarations, then out/ (validated)
	$(PYTHON) -m hpcobs.build.codegen
	$(PYTHON) build.py

check:  # the committed generated files are what the sources generate (writes nothing)
	$(PYTHON) build.py check

lint:  # format, lint, types and the import layers, each on its own
	$(PYTHON) -m ruff check --no-cache --output-format concise .
	$(PYTHON) -m ruff format --check --no-cache .
	$(PYTHON) -m mypy
	.venv/bin/lint-imports --no-cache

test:  # every test but the live servers' and the lint (`make lint` runs those tools directly)
	$(PYTHON) -m pytest -m "not live and not lint and not grafana"

test-live:  # Slurm, node_exporter, Prometheus, VictoriaMetrics and Alertmanager started on loopback
	$(PYTHON) -m pytest -m live

all: lint test test-live check
