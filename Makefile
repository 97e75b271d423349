# sparse-attn: the README's commands. Everything lives in .venv/ at the repo root.
#
#   make install   create .venv/ and install torch, fairseq-fixed and the plugin (idempotent)
#   make test      run the unit and e2e tiers, tests/unit and tests/e2e (installs first; what CI runs)
#   make test-unit the unit tier only: pure functions and in-process models, under 90 s
#   make test-gpu  tests/gpu: kernels and fairseq on a CUDA device (skipped, one line, without one)
#   make demo      train every kind of attention on the synthetic corpus and compare them
#   make bench     speed ratios against softmax
#   (both write under .work/, not committed; the project publishes its own runs into
#   results/ with PUBLISH=results, e.g. make demo PUBLISH=results)
#   make lint      ruff over the packages, tests and benchmarks
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

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
# TORCH: a pip spec (TORCH_SPEC by default), or "system": the torch $(PYTHON) imports.
TORCH ?= $(TORCH_SPEC)
FAIRSEQ_SPEC ?= fairseq-fixed==0.12.3.1
# WHEELS=DIR: install from the wheels in DIR alone (make wheels fills it), no index.
WHEELS ?=
FROM := $(if $(WHEELS),--no-index --find-links $(WHEELS))
# fairseq-fixed's real runtime needs (its metadata also pulls torchaudio, which it never uses);
# tensorboardX serves --tensorboard-logdir (and silences fairseq's import-time notice).
FAIRSEQ_NEEDS := hydra-core==1.3.2 omegaconf==2.3.0 bitarray cffi regex sacrebleu scikit-learn tqdm packaging \
  tensorboardX
# The stamp holds the torch and fairseq specs it was installed with: another spec
# (TORCH, TORCH_SPEC, TORCH_INDEX, FAIRSEQ_SPEC; with TORCH=system, the version and folder of
# $(PYTHON)'s torch) makes it out of date, and install then replaces torch and rebuilds
# fairseq's extensions against it (they link torch; pip's wheel cache would hand back ones
# built against the old torch).
STAMP := $(VENV)/.installed
# numpy 2.2 is what fairseq-fixed was tested with here; with TORCH=system, the numpy beside
# that torch is kept (2.5 with torch 2.11+cu130 on an H100 ran fairseq): a second, older one
# in the venv would shadow it for every package built against it.
COMMA := ,
NUMPY_SPEC := $(if $(filter system,$(TORCH)),numpy>=1.24,numpy>=1.24$(COMMA)<2.3)
ifeq ($(TORCH),system)
# TORCH=system: $(PYTHON) is asked, without importing torch, for torch's version, its own
# Python version, triton's version ("none" if absent), the folder holding torch and its site
# folders (in its sys.path order). Nothing printed: it has no torch.
FIND_TORCH := import sys, os, site, importlib.util as u, importlib.metadata as m; \
  s = u.find_spec("torch"); \
  d = s and s.submodule_search_locations and os.path.dirname(list(s.submodule_search_locations)[0]); \
  v = lambda n: next((x.version for x in m.distributions(name=n)), "none"); \
  sites = set(getattr(site, "getsitepackages", list)() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])); \
  dirs = [p for p in sys.path if p == d or p in sites]; \
  d and print(v("torch"), "%d.%d" % sys.version_info[:2], v("triton"), d, *([] if d in dirs else [d]), *dirs)
SYSTEM_TORCH := $(shell $(PYTHON) -c '$(FIND_TORCH)' 2>/dev/null)
SYSTEM_PY := $(word 2,$(SYSTEM_TORCH))
# .venv/ sees them through a .pth file that adds $(PYTHON)'s site folders after its own
# (site.addsitedir, as --system-site-packages does for a base interpreter; that flag alone
# would miss them when $(PYTHON) is itself a venv's or conda's); pip there then counts the
# torch and triton found as installed, and the pins keep it from installing others.
SYSTEM_PTH := $(VENV)/lib/python$(SYSTEM_PY)/site-packages/_system_torch.pth
SYSTEM_PINS := $(VENV)/system-torch.txt
SPEC := $(strip torch=system:$(word 1,$(SYSTEM_TORCH)):$(word 4,$(SYSTEM_TORCH)) $(FAIRSEQ_SPEC))
else
SPEC := $(strip $(TORCH) $(TORCH_INDEX) $(FAIRSEQ_SPEC))
endif
PIP_INSTALL := $(PIP) install $(FROM) $(if $(SYSTEM_PINS),-c $(SYSTEM_PINS))
# The stamp: SPEC on its first line, the optional parts left out on its second.
STAMPED = $(strip $(SPEC) without: $(sort $(WITHOUT)))
ifneq ($(STAMPED),$(strip $(shell cat $(STAMP) 2>/dev/null)))
.PHONY: $(STAMP)
endif
# pytest-xdist processes for make test (each one thread; the session fixtures are made
# once per process, a module marked xdist_group runs on one of them).
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# Optional parts: make install installs each (make wheels downloads each) unless WITHOUT
# names it. The stamp records WITHOUT: naming other parts installs what is now wanted.
#   meteor: Meteor 1.5 (sparse-attn-score's METEOR), 100 MB;  lint: ruff, for make lint;
#   hf: transformers, for sparse_attn_plugin.huggingface's tests (tiny models built from
#   configs, nothing downloaded; 5.24 is the version tested; it does not depend on torch,
#   so it never replaces the torch installed above).
OPTIONAL_SPECS := meteor=pycocoevalcap==1.2 lint=ruff>=0.6 hf=transformers>=5.24,<6
WITHOUT ?=
$(if $(filter-out $(foreach p,$(OPTIONAL_SPECS),$(firstword $(subst =, ,$(p)))),$(WITHOUT)),\
  $(error WITHOUT=$(WITHOUT): the optional parts are $(foreach p,$(OPTIONAL_SPECS),$(firstword $(subst =, ,$(p))))))
# The specs of the optional parts wanted: meteor's jar has no needs (--no-deps below).
WANTED = $(foreach p,$(OPTIONAL_SPECS),$(if $(filter $(firstword $(subst =, ,$(p))),$(WITHOUT)),,\
  "$(patsubst $(firstword $(subst =, ,$(p)))=%,%,$(p))"))
METEOR_SPEC = $(filter "pycocoevalcap%,$(WANTED))
TOOL_SPECS = $(filter-out "pycocoevalcap%,$(WANTED))

# Where make demo and make bench write: .work/demo, .work/bench, .work/evaluation.
PUBLISH ?= .work

.PHONY: install wheels test test-unit test-gpu gpu-report demo bench lint clean-venv

install: $(STAMP)

$(STAMP): setup.py pyproject.toml requirements-dev.txt Makefile
ifeq ($(TORCH),system)
	$(if $(SYSTEM_TORCH),,$(error make install TORCH=system: $(PYTHON) has no torch; name one that has: PYTHON=/path/to/python))
endif
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@was="$$(head -n 1 $(STAMP) 2>/dev/null)"; if [ -n "$$was" ] && [ "$$was" != "$(SPEC)" ]; then \
	  echo "make install: installed with '$$was', asked for '$(SPEC)':" \
	       "replacing torch and rebuilding fairseq"; \
	  rm -f $(VENV)/lib/python*/site-packages/_system_torch.pth $(VENV)/system-torch.txt; \
	  $(PIP) uninstall -y torch fairseq-fixed && touch $(VENV)/.rebuild; fi
ifeq ($(TORCH),system)
	@$(BIN)/python -c 'import sys; sys.exit("%d.%d" % sys.version_info[:2] != "$(SYSTEM_PY)")' || \
	  { echo "make install: $(VENV) is not Python $(SYSTEM_PY), as $(PYTHON) is: make clean-venv" >&2; \
	    exit 1; }
	printf 'import site; site.addsitedir(%s)\n' $(foreach d,$(wordlist 5,999,$(SYSTEM_TORCH)),"'$(d)'") \
	  > $(SYSTEM_PTH)
	printf '%s\n' $(if $(filter-out none,$(word 1,$(SYSTEM_TORCH))),torch==$(word 1,$(SYSTEM_TORCH))) \
	  $(if $(filter-out none,$(word 3,$(SYSTEM_TORCH))),triton==$(word 3,$(SYSTEM_TORCH))) > $(SYSTEM_PINS)
	$(BIN)/python -W ignore -c 'import sys, torch; print("torch", torch.__version__, "from", torch.__file__); \
	  sys.exit(not torch.__file__.startswith("$(word 4,$(SYSTEM_TORCH))/"))'
else
	$(PIP_INSTALL) $(if $(WHEELS),,$(TORCH_INDEX)) "$(TORCH)"
endif
	$(PIP_INSTALL) "$(NUMPY_SPEC)" cython setuptools wheel
ifeq ($(TORCH),system)
	# its own fairseq, even where $(PYTHON) has one
	$(BIN)/python -c 'import sys, fairseq; sys.exit(not fairseq.__file__.startswith(sys.prefix))' \
	  2>/dev/null || $(PIP_INSTALL) --no-deps --no-build-isolation --ignore-installed \
	    $$(test -f $(VENV)/.rebuild && echo --no-cache-dir) "$(FAIRSEQ_SPEC)"
else
	$(BIN)/python -c "import fairseq" 2>/dev/null || \
	  $(PIP_INSTALL) --no-deps --no-build-isolation \
	    $$(test -f $(VENV)/.rebuild && echo --no-cache-dir) "$(FAIRSEQ_SPEC)"
endif
	rm -f $(VENV)/.rebuild
	$(PIP_INSTALL) $(FAIRSEQ_NEEDS)
	$(PIP_INSTALL) -r $(if $(SYSTEM_PINS),<(grep -v '^triton' requirements-dev.txt),requirements-dev.txt) \
	  $(TOOL_SPECS)
	# Meteor 1.5 (jar + English paraphrases) ships in pycocoevalcap; its pycocotools need is unused.
	$(if $(METEOR_SPEC),$(PIP_INSTALL) --no-deps $(METEOR_SPEC))
	$(PIP_INSTALL) --no-build-isolation -e .
	$(BIN)/python -c "import torch, fairseq, entmax, sparse_attn_plugin; print('torch', torch.__version__, '| fairseq', fairseq.__version__)"
	printf '%s\n' "$(SPEC)" "without: $(sort $(WITHOUT))" > $(STAMP)

# make wheels: pip download for WHEELS_PYTHON on WHEELS_PLATFORM, binary wheels only. pip
# (23.2, here) takes a manylinux_2_X tag literally, so the older glibc tags are named too.
WHEELS_PYTHON ?= $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
WHEELS_PLATFORM ?= manylinux_2_28_x86_64
WHEELS_PLATFORMS = $(shell for p in $(WHEELS_PLATFORM); do echo --platform $$p; \
  if [[ $$p =~ ^manylinux_2_([0-9]+)_(.+)$$ ]]; then x=$${BASH_REMATCH[1]} a=$${BASH_REMATCH[2]}; \
    for ((y = x - 1; y >= 5; y--)); do echo --platform manylinux_2_$${y}_$$a; done; \
    for l in 17:manylinux2014 12:manylinux2010 5:manylinux1; do \
      (( x >= $${l%:*} )) && echo --platform $${l#*:}_$$a; done; fi; done)
DOWNLOAD = $(PYTHON) -m pip --disable-pip-version-check download --dest $(WHEELS) --only-binary=:all: \
  --python-version $(WHEELS_PYTHON) $(WHEELS_PLATFORMS)
# PyPI has these only as sources; pure Python, their wheels build anywhere.
SDIST_ONLY := antlr4-python3-runtime==4.9.3
# These need torch, which each download below leaves out: their other needs are read from
# their wheels' metadata and downloaded with the rest.
NEED_TORCH := entmax>=1.3

wheels:
	$(if $(WHEELS),,$(error make wheels: name the folder, e.g. make wheels WHEELS=/tmp/wheels))
	mkdir -p $(WHEELS)
ifneq ($(TORCH),system)
	$(DOWNLOAD) $(TORCH_INDEX) "$(TORCH)"
endif
	$(PYTHON) -m pip wheel --no-deps --wheel-dir $(WHEELS) $(SDIST_ONLY)
	# fairseq-fixed: its wheel for that Python and platform (PyPI has cp312), else built here
	# against $(PYTHON)'s torch, numpy and cython, for this Python and machine only.
	$(DOWNLOAD) --no-deps "$(FAIRSEQ_SPEC)" || { echo "make wheels: building it here"; \
	  [ "$(WHEELS_PYTHON)" = "$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')" ] || \
	  { echo "make wheels: no $(FAIRSEQ_SPEC) wheel for Python $(WHEELS_PYTHON); make one with" \
	         "PYTHON=<a Python $(WHEELS_PYTHON) with torch, numpy and cython>" >&2; exit 1; }; \
	  $(PYTHON) -m pip wheel --no-deps --no-build-isolation --wheel-dir $(WHEELS) "$(FAIRSEQ_SPEC)"; }
	$(DOWNLOAD) --no-deps $(METEOR_SPEC) "$(NEED_TORCH)"
	# this package, from a copy of the checkout's files (setuptools would add stale ones in build/)
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then src=$$(mktemp -d); \
	  trap 'rm -rf $$src' EXIT; git ls-files -z --cached --others --exclude-standard | \
	  tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C $$src; else src=.; fi; \
	  $(PYTHON) -m pip wheel --no-deps --wheel-dir $(WHEELS) $$src
	needs=$$(mktemp) && trap 'rm -f $$needs' EXIT && \
	  for w in $(WHEELS)/sparse_attn-*.whl $(WHEELS)/entmax-*.whl; do \
	    $(PYTHON) -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
	      print(z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode())' \
	      $$w; done | sed -n 's/^Requires-Dist: *//p' | \
	    grep -v 'extra *==' | grep -v -E '^(torch|entmax)\b' > $$needs && \
	  $(DOWNLOAD) --find-links $(WHEELS) -c <(echo 'torch<0') "$(NUMPY_SPEC)" cython setuptools \
	    wheel $(FAIRSEQ_NEEDS) -r $$needs \
	    -r $(if $(filter system,$(TORCH)),<(grep -v '^triton' requirements-dev.txt),requirements-dev.txt) \
	    $(TOOL_SPECS)

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
	$(BIN)/python benchmarks/bench_constrained.py --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/bench_metrics.py --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/bench_data_prep.py --out $(PUBLISH)/bench
	$(BIN)/python benchmarks/drop_calibration.py --out $(PUBLISH)/evaluation

lint: install
	$(BIN)/ruff check sparse_attn_plugin sparse_attn_experiments sparse_attn_data tests benchmarks

clean-venv:
	rm -rf $(VENV)
