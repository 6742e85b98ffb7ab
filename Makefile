# speedlab: set-up, the main job and the tests, from this repository's files alone.
#   make run    set up, then open JupyterLab on the lesson notebooks (speedlab demo without a browser)
#   make demo   set up, then train the image lab in the terminal and show where the time goes
#   make test   set up (chromium included, for the browser tests), lint (format, style, layers),
#               run the whole test suite, then its torch-free part on the oldest and newest Python
#   make test-pythons   the whole suite on every Python the project claims, one venv each
#   make test-xla       the XLA tests on XLA's CPU runtime, in .venv-xla (torch and torch-xla 2.9.0)
#   make gpu-check      every GPU figure against a synchronised truth, on a lent GPU (SIMULATE=1:
#                       on the simulated device)

VENV   ?= .venv
PYTHON ?= python3
# The torch to install first (pyproject keeps a normal range). On the workshop machines and CI,
# torch==2.13.0 for Python 3.11 is the CPU build, on local disk. Elsewhere pip takes PyPI's
# build, which on Linux x86_64 carries CUDA (about 5 GB); on a machine without a GPU, take the
# CPU build from PyTorch's own index: `make TORCH_INDEX=https://download.pytorch.org/whl/cpu`.
TORCH       ?= torch==2.13.0
TORCH_INDEX ?=
TORCH_PIP    = $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH)"
# The test tools' own dependencies must not replace that torch: the project's install names it
# again. LitData (streaming datasets, in the tests) comes without its dependencies: it asks for
# torchvision, whose PyPI build fails to load beside a CPU torch and then breaks torch.compile;
# pyproject's test extra lists what it needs for streaming tensors.
LITDATA     ?= litdata>=0.2.50
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

# Every Python the project claims (pyproject's requires-python), each in a venv of its own.
PYTHONS      ?= 3.10 3.11 3.12 3.13
EDGE_PYTHONS ?= 3.10 3.13
# The part of the suite that `make test` also runs on EDGE_PYTHONS, in venvs without torch
# (.edge-3.10, ...): the version-sensitive parts that need none (a rank's exit handler and
# hand-over in forked processes, forking beside speedlab's threads, the kernel's output capture,
# pyproject parsing, the garbage collector's callbacks) with the results, the system sampler and
# the knobs. PyPI's torch for those
# Pythons is a CUDA build of several GB, whose download took CI most of its time; the whole
# suite, real DDP ranks included, runs on every Python with `make test-pythons`.
EDGE_TESTS   ?= tests/results tests/measure/test_ranks_exit.py tests/measure/test_fork_pause.py \
                tests/measure/test_system.py tests/measure/test_cgroup.py tests/measure/test_heap.py \
                tests/notebook/test_capture.py \
                tests/notebook/test_tables.py tests/notebook/test_report.py \
                tests/notebook/test_plots.py tests/test_binder.py tests/test_layout.py \
                tests/test_cli.py

# $(call on-python,X.Y,COMMAND): run COMMAND where Python X.Y is on this machine (on PATH, or
# pyenv's); where it is not, say so and skip, except on CI, where that fails.
on-python = @if ! .ci/python-for $(1) >/dev/null; then \
		if [ "$$CI" = true ]; then echo "Python $(1) not found"; exit 1; fi; \
		echo "Python $(1) not found: skipped"; exit 0; \
	fi; $(2)

.PHONY: setup run demo test lint format browser-deps clean test-pythons test-edges venvs setup-xla test-xla \
	gpu-wheels setup-gpu-box gpu-check

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH_PIP)
	$(PY) -m pip install --quiet -e ".[test]" "$(TORCH)"
	$(PY) -m pip install --quiet --no-deps "$(LITDATA)"
	touch $(STAMP)

# JupyterLab prints the address to open (with its token) once it serves. As root (a container,
# a cloud VM) it needs --allow-root; `make run LAB_ARGS="--no-browser --port=8890"` adds
# JupyterLab's own options (--ip=0.0.0.0 to reach a container from outside).
LAB_ARGS ?=
ROOT_ARG = $(if $(filter 0,$(shell id -u)),--allow-root)

run: setup
	@if [ -d notebooks ] && ls notebooks/*.ipynb >/dev/null 2>&1; then \
		echo "JupyterLab starts on the lessons: open the http://...:PORT/lab?token=... address it prints below."; \
		exec $(VENV)/bin/jupyter lab notebooks/ $(ROOT_ARG) $(LAB_ARGS); \
	else \
		exec $(VENV)/bin/speedlab demo; \
	fi

demo: setup
	$(VENV)/bin/speedlab demo

# Debian's chromium for the browser tests (Playwright's own browser download is not used), and
# the widgets' HTML manager from the npm registry (what an exported notebook's page loads from a
# CDN to draw the widgets), which the export test serves to the page itself.
HTML_MANAGER ?= @jupyter-widgets/html-manager@1.0.15
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
		else \
			echo "chromium is missing and cannot be installed here: the browser tests will be skipped"; \
		fi; }
	@test -d .browser/html-manager || { \
		if command -v npm >/dev/null 2>&1; then \
			rm -rf .browser/pack && mkdir -p .browser/pack && \
			(cd .browser/pack && npm pack --silent "$(HTML_MANAGER)" >/dev/null && tar -xzf *.tgz) && \
			mv .browser/pack/package .browser/html-manager && rm -rf .browser/pack; \
		else \
			echo "npm is missing: the export test that draws the widgets will be skipped"; \
		fi; }

# lint-imports checks the layers (pyproject's [tool.importlinter]): no import runs up, no cycle.
lint: setup
	$(VENV)/bin/ruff format --check speedlab tests benchmarks examples
	$(VENV)/bin/ruff check speedlab tests benchmarks examples
	$(VENV)/bin/lint-imports

format: setup
	$(VENV)/bin/ruff format speedlab tests benchmarks examples
	$(VENV)/bin/ruff check --fix speedlab tests benchmarks examples

# Every venv the tests need installs side by side (pip waits mostly on downloads and disk); then
# the main suite, the GPU check on the simulated device, and the edges (light: torch-free unit
# tests) beside XLA.
test: venvs browser-deps lint
	$(VENV)/bin/pytest
	$(MAKE) gpu-check SIMULATE=1
	$(MAKE) -j2 test-edges test-xla

venvs:
	$(MAKE) -j4 setup setup-xla setup-gpu-box $(addprefix edge-venv-,$(EDGE_PYTHONS))

# Every GPU figure against a synchronised truth in one command (benchmarks/gpu_check.py), for a
# lent GPU machine: its Python has torch with CUDA and Lightning, and no IPython or ipywidgets
# (the rank tests load the extension in a shell). `make gpu-wheels` here puts the wheels the
# check needs besides, with theirs, into .gpu-wheels, carried there; `make gpu-check` there
# installs them into a folder of their own (that Python's may not be writable) put on PYTHONPATH
# with this repository, and records the workloads' steps into tests/fixtures/gpu. `make
# gpu-check SIMULATE=1` runs the same script on the simulated device (make test does),
# recording into test-artifacts/gpu-simulated, in a venv made as that machine's Python is
# (.gpu-box: torch and Lightning alone) with the wheels installed the same way, so that neither
# the script nor its needs rot between lent GPUs.
GPU_PYTHON ?= python3
GPU_WHEELS ?= .gpu-wheels
GPU_SITE   ?= /tmp/speedlab-gpu-site
GPU_NEEDS  ?= psutil pillow pytest pytest-timeout nvidia-ml-py ipython ipywidgets
GPU_TARGET ?= --python-version 3.12 --platform manylinux2014_x86_64 --only-binary=:all:
GPU_BOX    ?= .gpu-box
GPU_BOX_LIGHTNING ?= lightning==2.6.6
GPU_CHECK   = $(GPU_PYTHON) -m pip install --quiet --no-index --find-links $(GPU_WHEELS) \
		--upgrade --target $(GPU_SITE) $(GPU_NEEDS) && \
	PYTHONPATH=$(GPU_SITE):$(CURDIR) $(GPU_PYTHON) benchmarks/gpu_check.py

gpu-wheels: setup
	$(PY) -m pip download --quiet --dest $(GPU_WHEELS) $(GPU_TARGET) $(GPU_NEEDS)

setup-gpu-box: $(GPU_BOX)/.installed

$(GPU_BOX)/.installed: pyproject.toml
	$(PYTHON) -m venv $(GPU_BOX)
	$(GPU_BOX)/bin/python -m pip install --quiet --upgrade pip
	$(GPU_BOX)/bin/python -m pip install --quiet $(TORCH_PIP) "$(GPU_BOX_LIGHTNING)"
	touch $@

ifdef SIMULATE
gpu-check: GPU_PYTHON = $(GPU_BOX)/bin/python
gpu-check: GPU_WHEELS = $(GPU_BOX)/wheels
gpu-check: GPU_SITE = $(CURDIR)/$(GPU_BOX)/site
gpu-check: GPU_TARGET = --only-binary=:all:
gpu-check: setup-gpu-box gpu-wheels
	$(GPU_CHECK) --simulate --record test-artifacts/gpu-simulated \
		--probe-steps test-artifacts/gpu-simulated/probe-steps.json
else
gpu-check:
	$(GPU_CHECK) --record tests/fixtures/gpu --probe-steps test-artifacts/gpu-probe-steps.json
endif

# XLA on its CPU runtime (tests/xla): torch-xla 2.9.0 needs torch 2.9.0, in a venv of its own
# beside the main one's torch. PyPI's torch 2.9.0 carries CUDA: about 7 GB, which the registry
# gave in under 3 minutes. PJRT_DEVICE=CPU must be set before torch_xla is imported.
XLA_VENV ?= .venv-xla
XLA_TORCH ?= torch==2.9.0
XLA_PINS ?= "$(XLA_TORCH)" torch-xla==2.9.0
XLA_TESTS ?= tests/xla tests/measure/devices/test_xla.py

setup-xla: $(XLA_VENV)/.installed

$(XLA_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(XLA_VENV)
	$(XLA_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(XLA_VENV)/bin/python -m pip install --quiet $(XLA_PINS)
	$(XLA_VENV)/bin/python -m pip install --quiet -e . pytest pytest-timeout "$(XLA_TORCH)"
	touch $@

test-xla: setup-xla
	PJRT_DEVICE=CPU $(XLA_VENV)/bin/pytest -p no:cacheprovider $(XLA_TESTS)

# `make test-python-3.13 PYTEST_ARGS=tests/results`: the suite (or a part) on one Python, in
# .venv-3.13. pip takes torch's CPU build from local disk only where one lies there (3.11 on the
# workshop machines); elsewhere PyPI's build, with CUDA (about 5 GB).
.venv-%/.installed: pyproject.toml
	$$(.ci/python-for $*) -m venv .venv-$*
	.venv-$*/bin/python -m pip install --quiet --upgrade pip
	.venv-$*/bin/python -m pip install --quiet $(TORCH_PIP)
	.venv-$*/bin/python -m pip install --quiet -e ".[test]" "$(TORCH)"
	.venv-$*/bin/python -m pip install --quiet --no-deps "$(LITDATA)"
	touch $@

test-python-%:
	$(call on-python,$*,$(MAKE) --no-print-directory .venv-$*/.installed && .venv-$*/bin/pytest $(PYTEST_ARGS))

test-pythons: $(addprefix test-python-,$(PYTHONS))

# `make test-edge-3.13`: EDGE_TESTS on one Python, in .edge-3.13: speedlab without its
# dependencies (no torch, no Lightning) and what those tests import.
.edge-%/.installed: pyproject.toml tests/requirements-edge.txt
	$$(.ci/python-for $*) -m venv .edge-$*
	.edge-$*/bin/python -m pip install --quiet --upgrade pip
	.edge-$*/bin/python -m pip install --quiet -r tests/requirements-edge.txt
	.edge-$*/bin/python -m pip install --quiet --no-deps -e .
	touch $@

# An edge venv where that Python is here (skipped with a line where it is not, except on CI).
edge-venv-%:
	$(call on-python,$*,$(MAKE) --no-print-directory .edge-$*/.installed)

test-edge-%:
	$(call on-python,$*,$(MAKE) --no-print-directory .edge-$*/.installed && .edge-$*/bin/pytest $(EDGE_TESTS))

# One Python after another, not side by side: each starts Jupyter kernels (test_capture, the
# notebooks test_plots executes), and two kernels started at once in two processes can be given
# the same TCP port (jupyter_client picks free ports, then the kernel binds them later): CI on
# 2026-12-01 saw "ZMQError: Address already in use" and a kernel that died at startup.
test-edges:
	@set -e; for v in $(EDGE_PYTHONS); do $(MAKE) --no-print-directory test-edge-$$v; done

clean:
	rm -rf $(VENV) .venv-3.* .edge-3.* $(XLA_VENV) $(GPU_BOX) .pytest_cache .ruff_cache .speedlab
