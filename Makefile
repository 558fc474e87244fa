# kbtool: `make demo` runs the sample corpus end to end, `make test` runs the suite.
# Both create .venv and install everything on first use (CPU torch first: an unpinned torch
# would pull a multi-GB CUDA build).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kbtool-installed
DEMO_STORE ?= .kb-demo
TORCH ?= torch==2.13.0

.PHONY: install demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check $(TORCH)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

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
	$(BIN)/kbtool eval eval_sets/sample.jsonl --store $(DEMO_STORE) --modes bm25,dense,dense:use-m,hybrid,contract --out $(DEMO_STORE)-eval
	$(BIN)/kbtool calibrate eval_sets/sample.jsonl --store $(DEMO_STORE) --out $(DEMO_STORE)-calibration

test: install
	$(BIN)/python -m pytest

bench: install
	$(BIN)/python bench/run.py

clean:
	rm -rf $(DEMO_STORE) $(DEMO_STORE)-eval $(DEMO_STORE)-calibration bench/out
