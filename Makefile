# Two commands for a newcomer (README.md):
#   make quickstart   set up .venv and run the quickstart study end to end
#   make test         set up .venv (and the test services) and run the whole test suite
# and for maintainers: make docs (the reference pages and the site), make lint.
PYTHON ?= python3
VENV   ?= .venv
# The CPU wheel. A GPU user installs their own torch into $(VENV) first; setup then keeps it.
TORCH  ?= torch==2.13.0
BIN    := $(VENV)/bin

.PHONY: setup quickstart test lint docs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# torch first: an unpinned torch pulled in by a dependency would be a multi-GB CUDA build. The
# rest through uv with pip's configuration (.ci/install.py: ~40 s where pip takes ~150 s).
$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python .ci/install.py -e ".[dev,postgres,images,docs]"
	touch $@

setup: $(VENV)/.installed

# A fresh run dir each time (runs/quickstart-YYYYmmdd-HHMMSS); the run prints its report's path.
quickstart: setup
	$(BIN)/tlmsearch run studies/quickstart.yaml --name quickstart-$$(date +%Y%m%d-%H%M%S)

# The suite runs from an empty home directory (.ci/fresh-home): it must pass on a fresh machine.
test: setup
	bash .ci/with-services.sh bash .ci/fresh-home $(BIN)/python -m pytest

# tests/test_lint.py runs both in the suite (and so in CI); `ruff format PATHS` fixes the second.
lint: setup
	$(BIN)/ruff check tlmsearch tests benchmarks docs/hooks
	$(BIN)/ruff format --check tlmsearch tests benchmarks docs/hooks

# The generated reference pages (the study YAML's schema and reference from the pydantic models,
# the CLI's from the typer app; tests/test_schema.py and tests/test_docs.py fail when a committed
# one is stale), then the site (mkdocs.yml) into site/, offline: a warning is an error.
docs: setup
	$(BIN)/tlmsearch schema --out docs/study.schema.json
	$(BIN)/tlmsearch schema --space --out docs/space.schema.json
	$(BIN)/tlmsearch schema --markdown --out docs/reference.md
	$(BIN)/python -m tlmsearch.cli_reference --out docs/cli.md
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
