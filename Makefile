# sparse-attn: the README's commands. Everything lives in .venv/ at the repo root.
#
#   make install   create .venv/ and install torch, fairseq-fixed and the plugin (idempotent)
#   make test      run the unit and e2e tiers, tests/unit and tests/e2e (installs first; what CI runs)
#   make test-unit the unit tier only: pure functions and in-process models, about 2 min
#   make test-gpu  tests/gpu: kernels and fairseq on a CUDA device (skipped, one line, without one)
#   make demo      train every kind of attention on the synthetic corpus and compare them
#   make bench     speed ratios against softmax
#   (both write under .work/, not committed; the project publishes its own runs into
#   results/ with PUBLISH=results, e.g. make demo PUBLISH=results)
#   make lint      ruff over the packages, tests, benchmarks and tools
#
#   make clean-venv remove .venv/
#
# Choose another torch build with TORCH_SPEC / TORCH_INDEX (tested: 2.13.0+cpu), e.g. CUDA 12.8:
#   make install TORCH_INDEX="--index-url https://download.pytorch.org/whl/cu128"
# A spec other than the installed one replaces torch and rebuilds fairseq (README: Installing).
#
# Into an existing environment and offline (docs/gpus.md, "Installing on a cluster"):
#   make install TORCH=system   .venv/ sees the torch (and triton) of $(PYTHON), e.g. a cluster's
#                               CUDA build, and never installs or replaces them
#   make wheels WHEELS=DIR [WHEELS_PYTHON=3.12] [WHEELS_PLATFORM=manylinux_2_28_x86_64] [TORCH=system]
#                               every wheel install needs, for that Python and platform, into DIR
#   make install WHEELS=DIR     everything from DIR, no index touched (pip --no-index)
#   WITHOUT="meteor lint hf"    leave out optional parts (install and wheels): Meteor 1.5's
#                               jar (pycocoevalcap, 100 MB), ruff, transformers; for a node
#                               that runs the GPU tier alone (make gpu-report)
#   make gpu-report             the GPU verdict: GPU tier and GPU benchmarks into
#                               $(PUBLISH)/gpu (docs/gpus.md, "The GPU report")
# Give TORCH=system (and PYTHON) to every make command, or export them: without, the default
# spec differs from the installed one, and install would replace torch.
#
# install and wheels run tools/install.py (stdlib Python, before any venv exists), which
# echoes what it runs: make -n prints its plan, make -s quiets it.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
# TORCH: a pip spec (TORCH_SPEC by default), or "system": the torch $(PYTHON) imports.
TORCH ?= $(TORCH_SPEC)
FAIRSEQ_SPEC ?= fairseq-fixed==0.12.3.1
WHEELS ?=
# make wheels: for $(PYTHON)'s version unless WHEELS_PYTHON names one
WHEELS_PYTHON ?=
WHEELS_PLATFORM ?= manylinux_2_28_x86_64
WITHOUT ?=
# pytest-xdist processes for make test, each one thread
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder
PUBLISH ?= .work

# make's -n and -s reach the script; what would stop it (--check, one line) stops make.
FLAGS = $(firstword -$(MAKEFLAGS))
INSTALL = python3 tools/install.py --python "$(PYTHON)" --venv "$(VENV)" --torch "$(TORCH)" \
  --torch-index="$(TORCH_INDEX)" --fairseq "$(FAIRSEQ_SPEC)" --wheels "$(WHEELS)" \
  --wheels-python "$(WHEELS_PYTHON)" --wheels-platform "$(WHEELS_PLATFORM)" \
  --without "$(WITHOUT)" $(if $(findstring n,$(FLAGS)),--dry-run) $(if $(findstring s,$(FLAGS)),--quiet)
stop_on = $(if $(1),$(error $(1)))

.PHONY: install wheels test test-unit test-gpu gpu-report demo bench lint clean-venv

install wheels:
	$(call stop_on,$(shell $(INSTALL) --check $@))
	+@$(INSTALL) $@

test: install
	$(PYTEST) tests/unit tests/e2e

test-unit: install
	$(PYTEST) tests/unit

test-gpu: install
	$(PYTEST) tests/gpu

gpu-report: install
	$(BIN)/python benchmarks/gpu_report.py run --out $(PUBLISH)/gpu

demo: install
	$(BIN)/sparse-attn-compare --out $(PUBLISH)/demo

bench: install
	$(BIN)/python benchmarks/bench_normalizers.py --profile --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/bench_training.py --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/bench_end_to_end.py --models demo --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/bench_hard_attention.py --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/bench_decode_ops.py --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/bench_output_layer.py --out $(PUBLISH)/bench
	$(BIN)/python -m sparse_attn_data.multi30k_de_en --raw-dir ../shared/realdata/multi30k/raw
	$(BIN)/python benchmarks/bench_entmax_loss_training.py --data data-bin/multi30k_de_en --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/bench_constrained.py --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/bench_metrics.py --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/bench_data_prep.py --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/drop_calibration.py --out $(PUBLISH)/evaluation

lint: install
	$(BIN)/ruff check sparse_attn_plugin sparse_attn_experiments sparse_attn_data tests benchmarks tools

clean-venv:
	rm -rf $(VENV)
