# Two entry points: `make run` and `make test`. Both create and reuse .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.mxtrim-installed

.PHONY: run test bench screenshots clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall whenever the project metadata changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/mxtrim

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/inventory.py
	$(BIN)/python benchmarks/trim_dummy.py
	$(BIN)/python benchmarks/tui_startup.py

screenshots: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,screenshots]'
	$(BIN)/python screenshots/make_screenshots.py

clean-venv:
	rm -rf $(VENV)
