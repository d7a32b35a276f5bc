# clawpoint: the two commands a new user needs are `make demo` and `make test`.
# Both install what is missing (system packages as root, the Python venv) and are quick
# when everything is already there.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: demo test lint typecheck bench deps venv docs clean slurm-up slurm-down

venv: $(STAMP)
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

deps:
	scripts/install-system-deps.sh --all

demo: deps venv
	$(BIN)/clawpoint demo

lint: venv
	$(BIN)/ruff check core mcp_server tests bench
	$(BIN)/ruff format --check core mcp_server tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

test: deps venv lint
	scripts/run-tests.sh

bench: deps venv
	$(BIN)/python bench/checkpoint.py
	$(BIN)/python bench/spot_policy.py
	$(BIN)/python bench/planner.py

docs: venv
	$(BIN)/python scripts/gen-mcp-docs.py > docs/mcp-tools.md

slurm-up:
	scripts/slurm-cluster.sh up
slurm-down:
	scripts/slurm-cluster.sh down

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache bench/results
