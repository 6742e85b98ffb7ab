# speedlab: set-up, the main job and the tests, from this repository's files alone.
#   make run    set up, then open JupyterLab on the lesson notebooks (speedlab demo without a browser)
#   make demo   set up, then train the image lab in the terminal and show where the time goes
#   make test   set up (chromium included, for the browser tests), lint (format, style, layers),
#               run the whole test suite

VENV   ?= .venv
PYTHON ?= python3
# The torch build to install first. This default is the CPU build that workshop machines and CI
# have on local disk; on a GPU box use e.g. `make TORCH=torch` (pyproject keeps a normal range).
TORCH  ?= torch==2.13.0
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: setup run demo test lint format browser-deps clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

run: setup
	@if [ -d notebooks ] && ls notebooks/*.ipynb >/dev/null 2>&1; then \
		$(VENV)/bin/jupyter lab notebooks/; \
	else \
		$(VENV)/bin/speedlab demo; \
	fi

demo: setup
	$(VENV)/bin/speedlab demo

# Debian's chromium for the browser tests (Playwright's own browser download is not used).
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
		else \
			echo "chromium is missing and cannot be installed here: the browser tests will be skipped"; \
		fi; }

# lint-imports checks the layers (pyproject's [tool.importlinter]): no import runs up, no cycle.
lint: setup
	$(VENV)/bin/ruff format --check speedlab tests benchmarks examples
	$(VENV)/bin/ruff check speedlab tests benchmarks examples
	$(VENV)/bin/lint-imports

format: setup
	$(VENV)/bin/ruff format speedlab tests benchmarks examples
	$(VENV)/bin/ruff check --fix speedlab tests benchmarks examples

test: setup browser-deps lint
	$(VENV)/bin/pytest

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .speedlab
