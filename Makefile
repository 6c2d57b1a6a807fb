# One-command entry points. `make demo` and `make test` set everything up first.
PYTHON ?= python3
VENV ?= .venv
# torch is pinned through this constraints file (2.13.0: a local CPU build here). A GPU user
# installs the torch of their choice into $(VENV) first and runs `make setup CONSTRAINTS=`.
CONSTRAINTS ?= constraints.txt
PIP = $(VENV)/bin/pip
CONSTRAINT_FLAG = $(if $(CONSTRAINTS),-c $(CONSTRAINTS),)
STAMP = $(VENV)/.xdllm-setup

.PHONY: setup demo test test-fast browser-deps bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet $(CONSTRAINT_FLAG) torch
	$(PIP) install --quiet $(CONSTRAINT_FLAG) -e ".[test]"
	touch $(STAMP)

# The main job: train the MLM on the built-in sort task, generate on held-out prompts with
# denoising history, write TensorBoard logs, print the result.
demo: setup
	$(VENV)/bin/xdllm train experiment=sort_mlm run_dir=runs/sort_mlm

# Chromium for the TensorBoard browser test (Debian packages; needs root). Without it that one
# test is skipped with a message; everything else runs.
browser-deps:
	@command -v chromium >/dev/null 2>&1 || \
	  { (apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null) \
	    || echo "warning: could not install chromium; the browser test will be skipped"; }

# Tests run in parallel processes (pytest-xdist), one per core up to four: most tests run one
# torch thread, so one process would leave the other cores idle. TEST_WORKERS=0 runs them in one.
TEST_WORKERS ?= auto --maxprocesses=4

test: setup browser-deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS)

test-fast: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) -m "not slow and not browser"

clean:
	rm -rf $(VENV) runs .pytest_cache
