# Two entry points on a fresh machine: `make demo` and `make test`. Each builds .venv first.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DEMO_OUT ?= demo_out
# The real samples beside the project when they are there, else the embedded synthetic sample.
SHARED  := $(wildcard ../shared/data/tatoeba)
DEMO_DATA ?= $(if $(SHARED),--data ../shared/data,)

.PHONY: venv browser demo test test-fast lint bench docs clean

venv: $(STAMP)

# torch first so the pinned CPU wheel satisfies the constraint in pyproject (no CUDA download).
# The default LID model (lid.176.ftz) ships inside the package: nothing else to install.
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/python -c "import fasttext; assert hasattr(fasttext, 'train_supervised'), fasttext.__file__"
	touch $(STAMP)

# Resumable: a rerun skips the stages whose manifest matches (see `python -m pipelines.run --help`).
demo: $(STAMP)
	$(BIN)/python -m pipelines.run --config configs/demo.yaml $(DEMO_DATA) --output $(DEMO_OUT)

# --dist loadscope: a module's tests stay on one worker, so its module fixtures (a whole runner
# run, the contract cases) are built once, not once per worker. --no-loadscope-reorder: xdist
# otherwise hands out the modules with the most tests first, which overrides the costliest-first
# order of tests/conftest.py (tests/module_seconds.py) and left a runner module for the tail.
test: $(STAMP) browser
	$(BIN)/python -m pytest -q -n auto --dist loadscope --no-loadscope-reorder tests

# The labelling page's browser test drives Debian's Chromium (Playwright's own download cannot
# be reached here): installed when missing, so a fresh machine runs the test instead of skipping.
browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get install -y -q chromium >/dev/null 2>&1 \
	  || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; } \
	  || echo "chromium could not be installed: the browser test will skip"; }

# The development loop: every test but those marked slow, i.e. taking 2 s or more on 2 cores
# (end-to-end runs, clusters, servers, training, Beam jobs on real data). `make test` runs all.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadscope --no-loadscope-reorder -m "not slow" tests

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

# The docs' generated blocks (a dry-run plan, the runner's --help, the config reference) rewritten
# from the code; tests/docs/test_generated.py fails naming a block that differs.
docs: $(STAMP)
	$(BIN)/python -m tests.docs.generated

bench: $(STAMP)
	$(BIN)/pip install -q '.[bench]'
	@echo "see bench/README.md for the individual scripts"

clean:
	rm -rf $(VENV) $(DEMO_OUT)
