# One-command set-up: `make test` (the test suite) and `make demo` (the main job) build
# the virtual environment themselves on a fresh machine; a second run does nothing costly.
VENV ?= .venv
PY := $(VENV)/bin/python
# A CUDA user overrides the pin, e.g. make setup TORCH='torch==2.5.1'
TORCH ?= torch==2.13.0
# fairseq 0.12.x with the Python 3.11 fixes, as a prebuilt wheel (docs/design.md, "Environment")
FAIRSEQ ?= ve-fairseq==0.12.3

.PHONY: setup lint test test-slow demo figures results clean gpu-check gpu-check-quick

setup: $(VENV)/.installed

$(VENV)/.installed: setup.py requirements.txt Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q '$(TORCH)' 'numpy<2' cython
	$(PY) -m pip install -q -r requirements.txt
	# fairseq last and without its dependencies (requirements.txt has those it needs; not torchaudio, which
	# it lists but this project never uses): installed before, pip would list it as a broken dependency
	# of every later install ("ERROR: ... ve-fairseq requires torchaudio"); --no-deps skips that check
	$(PY) -m pip install -q --no-deps '$(FAIRSEQ)'
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	$(PY) -c "import torch, fairseq_eva, fairseq; print('torch', torch.__version__, '| fairseq', fairseq.__version__)"
	touch $@

# ruff's settings: ruff.toml
lint: setup
	$(VENV)/bin/ruff check .

# Triton for the Triton kernel's tests (run under its interpreter without a GPU); `make setup` does not need it.
# Installed only where none is: a CUDA torch brings its own, which must stay.
TRITON = triton==3.9.0

# The tests run on every core (pytest-xdist), each test file in one process: a file's fixtures (a trained model,
# prepared data) are built once. WORKERS=0 runs them in this one process, as plain pytest does.
WORKERS ?= auto

test: setup lint
	$(PY) -c "import triton" 2>/dev/null || $(PY) -m pip install -q $(TRITON)
	$(PY) -m pytest -q -n $(WORKERS) --dist loadfile -m "not slow" tests

test-slow: setup
	$(PY) -m pytest -q -n $(WORKERS) --dist loadfile -m slow tests

demo: setup
	PATH=$(abspath $(VENV))/bin:$$PATH bash scripts/demo.sh

# every figure of docs/results.md and the README, drawn again from benchmarks/results/
figures: setup
	$(PY) -m benchmarks.figures

# every table of README.md and docs/results.md marked `<!-- results: NAME -->`, written again from its record
results: setup
	$(PY) -m benchmarks.results_tables

clean:
	rm -rf $(VENV) *.egg-info

# On a CUDA machine (make setup TORCH='torch==X' for a CUDA build): correctness per kernel, speed against flash
# SDPA, the paper's configs under fairseq-hydra-train --fp16, a clean exit and a profile, in about 16 minutes on an
# H100 or H200 (docs/gpu_check.md); e.g. make gpu-check GPU_CHECK_ARGS='--parts speed_tokens'
GPU_CHECK_ARGS ?=
gpu-check: setup
	$(PY) -m benchmarks.gpu_check --out benchmarks/results/gpu $(GPU_CHECK_ARGS)

# The quick profile, within 8 minutes: the Triton kernel's correctness (float32, bfloat16), the paper configs'
# words/s, the layer eager and compiled. On a machine without `make setup`: bash benchmarks/gpu_check_quick.sh
gpu-check-quick: setup
	$(PY) -m benchmarks.gpu_check --quick --out benchmarks/results/gpu_quick $(GPU_CHECK_ARGS)
