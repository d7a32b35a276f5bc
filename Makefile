# clawpoint: the two commands a new user needs are `make demo` and `make test`.
# Both install what is missing (system packages as root, the Python venv) and are quick
# when everything is already there.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed
# Exact versions of every dependency (dev tools included): installs are reproducible.
# `make refresh-lock` re-resolves the newest allowed versions and rewrites it only when lint
# and the tests pass with them (TESTS="tests/cli" limits the tests it runs).
LOCK    = constraints.txt

.PHONY: demo test lint style typecheck bench reliability deps venv docs screenshots clean slurm-up slurm-down refresh-lock live-k8s live-k8s-down

# The editable install in compat mode: the checkout goes on sys.path by a plain .pth line.
# The default editable finder is imported by every Python start in the venv (the CLI's, the
# wrappers', the tests') and doubled a bare start here (11 -> 23 ms of CPU). setuptools calls
# compat transitional: where a later one refuses it, the default editable install follows.
venv: $(STAMP)
$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -c $(LOCK) --upgrade pip
	$(BIN)/python -m pip install -q -c $(LOCK) -e '.[dev]' --config-settings editable_mode=compat \
	  || $(BIN)/python -m pip install -q -c $(LOCK) -e '.[dev]'
	touch $(STAMP)

refresh-lock:
	PYTHON=$(PYTHON) scripts/refresh-lock.sh $(TESTS)

deps:
	scripts/install-system-deps.sh --all

demo: deps venv
	$(BIN)/clawpoint demo

lint: style typecheck

# The quick checks (seconds): style, formatting and the import contracts.
style: venv
	$(BIN)/ruff check core mcp_server tests bench
	$(BIN)/ruff format --check core mcp_server tests bench
	$(BIN)/lint-imports

typecheck: venv
	$(BIN)/mypy

# The quick checks first (they fail in seconds); mypy (minutes on a fresh clone) runs beside
# the suite, whose tests mostly wait on processes, and fails the run just the same.
test: deps venv style
	TYPECHECK=1 scripts/run-tests.sh

bench: deps venv
	$(BIN)/python bench/checkpoint.py
	$(BIN)/python bench/migration.py
	$(BIN)/python bench/resize.py
	$(BIN)/python bench/unprivileged.py
	$(BIN)/python bench/real_software.py
	$(BIN)/python bench/spot_policy.py
	$(BIN)/python bench/checkpoint_interval.py
	$(BIN)/python bench/elastic_slurm.py
	$(BIN)/python bench/slurm_migration.py
	$(BIN)/python bench/k8s_migration.py
	$(BIN)/python bench/planner.py
	$(BIN)/python bench/notice_to_safe.py
	$(BIN)/python bench/agent_cost.py
	$(BIN)/python bench/mcp_load.py
	$(BIN)/python bench/cli_start.py
	$(MAKE) reliability

# The full fault matrix (every operation x journal step x before/after); rewrites its table
# in docs/reliability.md from the results.
reliability: deps venv
	CLAWPOINT_FAULT_MATRIX=full CLAWPOINT_WRITE_RELIABILITY=1 $(BIN)/python -m pytest -q tests/reliability

docs: venv
	$(BIN)/python scripts/gen-mcp-docs.py > docs/mcp-tools.md

# The approval desk's pictures in docs/img, taken by its browser test (Chromium, CRIU); the
# suite itself writes them only into the test's own directory.
screenshots: deps venv
	CLAWPOINT_WRITE_SCREENSHOTS=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/browser/test_desk_spot_notice_browser.py

# The live Kubernetes suite on a local kind cluster (needs kind, docker and kubectl; see
# docs/kubernetes.md, "The live suite"). Re-running is safe; live-k8s-down removes it all.
live-k8s: venv
	scripts/kind-live.sh up
	scripts/kind-live.sh test

live-k8s-down:
	scripts/kind-live.sh down

slurm-up:
	scripts/slurm-cluster.sh up
slurm-down:
	scripts/slurm-cluster.sh down

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache bench/results
