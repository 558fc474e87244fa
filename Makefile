# kbtool: `make demo` runs the sample corpus end to end, `make test` runs the suite (what CI runs),
# `make test-fast` the tests that load no model and start no kbtool process (-m "not slow", < 1 min).
# Both create .venv on first use (CPU torch first: an unpinned torch would pull a multi-GB CUDA
# build). `make install` (and so `make demo`, `make bench`) installs the runtime dependencies only,
# as a user gets them; `make install-dev` (and so `make test`) adds the dev extras to the same .venv.
# Each has its own stamp, so the demo never depends on a test-only package.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kbtool-installed
DEV_STAMP := $(VENV)/.kbtool-dev-installed
DEMO_STORE ?= .kb-demo
TORCH ?= torch==2.13.0

.PHONY: install install-dev demo test test-fast docs bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check $(TORCH)
	$(BIN)/pip install --quiet --disable-pip-version-check -e .
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(DEV_STAMP)

install: $(STAMP)

install-dev: $(DEV_STAMP)

demo: install
	$(BIN)/kbtool ingest sample_corpus --store $(DEMO_STORE) --add-model use-m
	$(BIN)/kbtool status --store $(DEMO_STORE)
	$(BIN)/kbtool query "What causes error TW-E5120 and how do I fix it?" --store $(DEMO_STORE) --top-k 3
	$(BIN)/kbtool query "Which IP addresses do webhook deliveries come from, so we can allow them through our firewall?" --store $(DEMO_STORE) --top-k 3
	$(BIN)/kbtool query "出现同步冲突时，我的修改会丢失吗？" --store $(DEMO_STORE) --top-k 3
	$(BIN)/kbtool query "两个人同时改了同一个文件会怎样？" --store $(DEMO_STORE) --top-k 3
	$(BIN)/kbtool query "refund window" --filter 'dir=policies/**' --store $(DEMO_STORE) --top-k 3
	$(BIN)/kbtool query "What does error code TW-E8123 mean?" --store $(DEMO_STORE)
	$(BIN)/kbtool query "How long is the refund window in the EU?" --store $(DEMO_STORE) --context
	$(BIN)/kbtool query "What is the largest file the Tidewater agent can sync?" --store $(DEMO_STORE) --top-k 3 --set postprocess.freshness.prefer=newer
	$(BIN)/kbtool eval eval_sets/sample.jsonl --store $(DEMO_STORE) --modes bm25,dense,dense:use-m,hybrid,contract --out $(DEMO_STORE)-eval
	$(BIN)/kbtool calibrate eval_sets/sample.jsonl --store $(DEMO_STORE) --out $(DEMO_STORE)-calibration

# PYTHONDONTWRITEBYTECODE= : pytest keeps its rewritten test modules in __pycache__ (collection
# takes seconds without them) even where the environment turns bytecode caching off.
# -n auto --dist loadfile: pytest-xdist, one worker per core, each test file on one worker (its
# module fixtures built once); a worker loads the model once for its session.
test: install-dev
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n auto --dist loadfile

test-fast: install-dev
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -m "not slow"

# The documentation site (mkdocs.yml, docs/): --strict fails on a broken link or anchor; the command
# reference and the contract reference are generated from the code by docs/hooks.py.
docs: install-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --quiet --site-dir site

bench: install
	$(BIN)/python bench/run.py

clean:
	rm -rf $(DEMO_STORE) $(DEMO_STORE)-eval $(DEMO_STORE)-calibration bench/out site
