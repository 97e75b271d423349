# sparse-attn: the README's commands. Everything lives in .venv/ at the repo root.
#
#   make install   create .venv/ and install torch, fairseq-fixed and the plugin (idempotent)
#   make test      run the whole test suite, both tiers (installs first; what CI runs)
#   make test-unit the unit tier only: pure functions and in-process models, under 90 s
#   make demo      train every kind of attention on the synthetic corpus and compare them
#   make bench     speed ratios against softmax
#   (both write under .work/, not committed; the project publishes its own runs into
#   results/ with PUBLISH=results, e.g. make demo PUBLISH=results)
#   make lint      ruff over the package, tests, benchmarks and data_prep
#
#   make clean-venv remove .venv/
#
# Choose another torch build with TORCH_SPEC / TORCH_INDEX (tested: 2.13.0+cpu), e.g. CUDA 12.8:
#   make install TORCH_INDEX="--index-url https://download.pytorch.org/whl/cu128"
# A spec other than the installed one replaces torch and rebuilds fairseq (README: Installing).

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
FAIRSEQ_SPEC ?= fairseq-fixed==0.12.3.1
# fairseq-fixed's real runtime needs (its metadata also pulls torchaudio, which it never uses);
# tensorboardX serves --tensorboard-logdir (and silences fairseq's import-time notice).
FAIRSEQ_NEEDS := hydra-core==1.3.2 omegaconf==2.3.0 bitarray cffi regex sacrebleu scikit-learn tqdm packaging \
  tensorboardX
# The stamp holds the torch and fairseq specs it was installed with: another spec
# (TORCH_SPEC, TORCH_INDEX, FAIRSEQ_SPEC) makes it out of date, and install then replaces
# torch and rebuilds fairseq's extensions against it (they link torch; pip's wheel cache
# would hand back ones built against the old torch).
STAMP := $(VENV)/.installed
SPEC := $(strip $(TORCH_SPEC) $(TORCH_INDEX) $(FAIRSEQ_SPEC))
ifneq ($(SPEC),$(strip $(shell cat $(STAMP) 2>/dev/null)))
.PHONY: $(STAMP)
endif
# pytest-xdist processes for make test (each one thread; the session fixtures are made
# once per process, a module marked xdist_group runs on one of them).
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# Where make demo and make bench write: .work/demo, .work/bench, .work/evaluation.
PUBLISH ?= .work

.PHONY: install test test-unit demo bench lint clean-venv

install: $(STAMP)

$(STAMP): setup.py requirements-dev.txt Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@was="$$(cat $(STAMP) 2>/dev/null)"; if [ -n "$$was" ] && [ "$$was" != "$(SPEC)" ]; then \
	  echo "make install: installed with '$$was', asked for '$(SPEC)':" \
	       "replacing torch and rebuilding fairseq"; \
	  $(PIP) uninstall -y torch fairseq-fixed && touch $(VENV)/.rebuild; fi
	$(PIP) install $(TORCH_INDEX) "$(TORCH_SPEC)"
	$(PIP) install "numpy>=1.24,<2.3" cython setuptools wheel
	$(BIN)/python -c "import fairseq" 2>/dev/null || \
	  $(PIP) install --no-deps --no-build-isolation \
	    $$(test -f $(VENV)/.rebuild && echo --no-cache-dir) "$(FAIRSEQ_SPEC)"
	rm -f $(VENV)/.rebuild
	$(PIP) install $(FAIRSEQ_NEEDS)
	$(PIP) install -r requirements-dev.txt
	# Meteor 1.5 (jar + English paraphrases) ships in pycocoevalcap; its pycocotools need is unused.
	$(PIP) install --no-deps "pycocoevalcap==1.2"
	$(PIP) install --no-build-isolation -e .
	$(BIN)/python -c "import torch, fairseq, entmax, sparse_attn_plugin; print('torch', torch.__version__, '| fairseq', fairseq.__version__)"
	echo "$(SPEC)" > $(STAMP)

test: install
	$(PYTEST) tests

test-unit: install
	$(PYTEST) tests/unit

demo: install
	$(BIN)/sparse-attn-compare --out $(PUBLISH)/demo

bench: install
	$(BIN)/python benchmarks/bench_normalizers.py --profile --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/bench_training.py --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/bench_hard_attention.py --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/bench_constrained.py --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/bench_metrics.py --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/bench_data_prep.py --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/drop_calibration.py --out $(PUBLISH)/evaluation

lint: install
	$(BIN)/ruff check sparse_attn_plugin tests benchmarks data_prep

clean-venv:
	rm -rf $(VENV)
