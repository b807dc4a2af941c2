# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
# Both create the virtual environment (.venv) when it is missing.
#
# TORCH_SPEC picks the torch build installed first. The default pins the CPU build used
# here and in CI; for CUDA, run `make install TORCH_SPEC=torch` (pip's default Linux
# wheel bundles CUDA) or install the build you want into .venv before `make install`.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
EXPERIMENT ?= default
# pytest-xdist worker processes of `make test` (0: run the tests in pytest's own process)
TEST_WORKERS ?= 2
OUT ?= outputs/$(EXPERIMENT)

export HF_HUB_OFFLINE ?= 1
# a dropped connection to the package index is retried rather than failing the install
export PIP_RETRIES ?= 10
export PIP_RESUME_RETRIES ?= 10
export PIP_DEFAULT_TIMEOUT ?= 60
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install run test test-all bench mutate lint format docs docs-check wheel-smoke clean

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

install: $(VENV)/.installed

run: install  ## the first run: baselines, static routers, CABS-D, HPG, the residual learner, best-of-2
	$(VENV)/bin/torchroute simulate experiment=$(EXPERIMENT) out_dir=$(OUT) $(ARGS)

test: install  ## the test suite (fast, CPU, wandb offline), on TEST_WORKERS processes
	WANDB_MODE=offline $(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS)

test-all: install  ## also the slow tests
	WANDB_MODE=offline $(PY) -m pytest -q

bench: install  ## throughput benchmark of the batched LinUCB
	$(PY) benchmarks/linucb_throughput.py

# MUTANTS narrows the run, e.g. make mutate MUTANTS='torchroute.functional*'; results are kept
# in mutants/ (a rerun only tests what changed): `$(VENV)/bin/mutmut browse` to inspect them
mutate: install  ## mutation testing (mutmut) of functional/, metrics.py and learners/
	OMP_NUM_THREADS=1 WANDB_MODE=offline $(VENV)/bin/mutmut run $(MUTANTS)
	$(VENV)/bin/mutmut export-cicd-stats && cat mutants/mutmut-cicd-stats.json

docs: install  ## the documentation site (MkDocs) into site/, warnings are errors
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-check: install  ## run every code block marked <!-- check --> in README.md and docs/
	$(PY) tools/check_docs.py

wheel-smoke:  ## build the wheel, install it into a fresh venv, run the first commands elsewhere
	TORCH_SPEC="$(TORCH_SPEC)" tools/wheel_smoke.sh

lint: install
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

clean:
	rm -rf outputs wandb .cache .pytest_cache site
