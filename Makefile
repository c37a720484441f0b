# The two commands of the README: `make demo` (the main job) and `make test` (the whole suite).
# Each creates the virtual environment .venv when it is absent (or when pyproject.toml changed)
# and installs jaxrank with everything it needs. CI also runs `make docs` (the user guide and the
# API reference), `make lint` (ruff and mypy) and `make package-check` (the wheel installed on its
# own).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL := 2

DOCS_STAMP := $(VENV)/.installed-docs
# The compile-only accelerators (libtpu, the CUDA plugin) in an environment of their own.
ACCEL_VENV ?= .venv-accel
ACCEL_STAMP := $(ACCEL_VENV)/.installed

.PHONY: demo test lint docs package-check bench-evaluate bench-accelerators clean

# Packages are installed by uv (from PyPI, pinned below), which takes about a third of pip's time
# for the same set: `pip install -e '.[train,dev]'` 161 s, `uv pip install` 52 s in a fresh
# environment here, 8 GB with PyTorch's CUDA libraries. Plain pip works too, only slower.
UV_VERSION := 0.13.9
# $(call uv_install,VENV,PACKAGES): uv into VENV (if absent), then PACKAGES into VENV by uv.
define uv_install
	$(1)/bin/python -m pip install --quiet uv==$(UV_VERSION)
	$(1)/bin/uv pip install --quiet --python $(1)/bin/python $(2)
endef
MAIN_PACKAGES := -e '.[train,dev]'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(call uv_install,$(VENV),$(MAIN_PACKAGES))
	touch $(STAMP)

# The main job: every loss family and three baselines trained on the glyphs (characters across
# matplotlib's typefaces), beside an untrained network and the raw pixels. Rerunning resumes
# unfinished runs from their checkpoints and reuses finished ones. The quick run: one seed, from
# scratch, every loss at its default hyperparameters (the baselines untuned), about 2.5 minutes;
# the fair comparison (every loss tuned alike on validation classes, 5 seeds with 95% intervals,
# fine-tuned from a pretrained backbone and from scratch, about 40 minutes) is
# `$(PY) -m experiments.comparison.main` (docs/guide/comparison.rst), not a target here.
demo: $(STAMP)
	$(PY) -m experiments.job.main --config experiments/job/configs/glyphs.py --workdir runs/glyphs

# jaxrank with the `accelerators` extra (about 1.8 GB), for the compile-only test and benchmark.
$(ACCEL_STAMP): pyproject.toml
	$(PYTHON) -m venv $(ACCEL_VENV)
	$(call uv_install,$(ACCEL_VENV),-e '.[accelerators]')
	touch $(ACCEL_STAMP)

# Two pytest runs: the multi-device tests need 8 simulated CPU devices, set before JAX starts
# (that run in two workers too, its three files dealt out: 121 s -> 106 s here, 2026-11-28).
# The first runs in two workers (pytest-xdist: CI has 2 cores, and most tests are single-threaded
# tracing and compiling; each test file's tests stay on one worker, tests/conftest.py, so that the
# programs they share compile once; a module with an expensive fixture names its group,
# `pytestmark = pytest.mark.xdist_group(...)`, and the fixture is session-scoped: a worker runs
# other modules' tests in between, and a module-scoped fixture was set up again each time it came
# back, the notebooks executed twice) and lists its 15 slowest tests, the next candidates for
# cutting CI's time (the goal 25 minutes: 22 on an AMD EPYC, 35-42 on an Intel Xeon, each with 2
# cores, fresh clones, 2026-11-27; 27-30 on the AMD EPYC on 2026-11-28, after the blackbox losses'
# accelerator forms had brought it to 35; on 2026-11-29, fresh clones of `.ci/run` on the AMD
# EPYC: 26.4 minutes before the shared compilation cache below, 22.6 with it and 134 more tests,
# the main run 1,418 s -> 1,196 s; on 2026-12-02, after wave 7's tests, 2,644 s for 3,688 tests,
# the whole .ci/run 2,827 s: over the goal again; CI's own machine then took 5,222 s for the
# first run and was stopped at its 90 minutes during the second; here, quiet, 2,388 s and 130 s,
# the tests' own times 4,610 s; py-spy on tests/test_blocked.py: XLA:CPU compiling 45% of it,
# tracing 32%, lowering 8%);
# its tests/test_accelerators.py compiles every
# step for a TPU and an H100 in .venv-accel. Most of the suite's time is XLA:CPU compiling small
# programs that then run for microseconds: `--xla_backend_optimization_level=0` (LLVM without its
# optimisations) ran test_histogram and test_smooth_rank in 493 s instead of 583 s (and under a
# higher load); the suite passes with it, and the benchmarks, the notebooks (they run longer
# programs, which it slows down) and the default run keep XLA's default.
# On 2026-12-02 (tests/test_blocked.py alone, one process, quiet AMD EPYC): 89 s with that flag,
# 73 s adding `--xla_llvm_disable_expensive_passes=true --xla_cpu_parallel_codegen_split_count=1`,
# 51 s adding `--xla_cpu_use_fusion_emitters=false` (XLA:CPU's older loop emitters compile these
# small programs in about half the time), 45 s with pytest's unraisable-exception plugin off
# (`-p no:unraisableexception`: it ran `gc.collect()` several times after every test, 5-7% of that
# file's time). The notebooks drop these flags (tests/test_notebooks.py, SUITE_ONLY_FLAGS).
TEST_XLA_FLAGS := --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true \
  --xla_cpu_parallel_codegen_split_count=1 --xla_cpu_use_fusion_emitters=false
# JAX's persistent compilation cache, shared by every process of the run: both workers of each
# pytest run, the processes the tests start (the job's command line, the multi-process runs, the
# comparison's command) and the notebooks' kernels. A program compiled once is read back wherever
# the same program is compiled again, whichever jitted function object or process asks for it
# (tests/test_smooth_rank.py alone, one process: 129 s -> 112 s). Every compilation is kept (a
# minimum compile time of 0), with no size limit: a limit turns on eviction, which lists and stats
# every entry at each write, and with the suite's 5,000 or so entries that made the suite slower
# than without the cache. Without it a process could read an entry another is still writing (two
# processes compiling the same program in the same microseconds): JAX then warns and compiles it
# itself. Emptied at the start of each `make test`, so that a run here costs what CI's fresh clone
# pays. The compile-only accelerators' subprocess (tests/test_accelerators.py) runs without it.
TEST_CACHE := $(CURDIR)/.jax_cache
TEST_ENV := JAX_COMPILATION_CACHE_DIR=$(TEST_CACHE) JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
test: $(STAMP) $(ACCEL_STAMP)
	rm -rf $(TEST_CACHE)
	$(TEST_ENV) XLA_FLAGS="$(TEST_XLA_FLAGS)" $(PY) -m pytest -q -n 2 -p no:unraisableexception --dist loadgroup tests \
	  jaxrank --doctest-modules --ignore=tests/multidevice --durations=15
	$(TEST_ENV) XLA_FLAGS="$(TEST_XLA_FLAGS) --xla_force_host_platform_device_count=8" \
	  $(PY) -m pytest -q -n 2 -p no:unraisableexception --dist loadgroup tests/multidevice

# Lint (ruff), formatting (ruff format: reports, changes nothing) and types (mypy), configured in
# pyproject.toml; each runs even when an earlier one failed. Under a minute with mypy's cache.
lint: $(STAMP)
	status=0; \
	$(VENV)/bin/ruff check . || status=1; \
	$(VENV)/bin/ruff format --check . || status=1; \
	$(VENV)/bin/mypy || status=1; \
	exit $$status

$(DOCS_STAMP): $(STAMP)
	$(call uv_install,$(VENV),-e '.[docs]')
	touch $(DOCS_STAMP)

# The quickstart, the notebooks (rendered, not executed), the user guide (docs/guide/) and the API
# reference from the docstrings, into docs/_build/html (open index.html there; it works offline).
# Warnings (a malformed docstring, a broken reference, a public name on no page, a page loading a
# script from another site) are errors.
docs: $(DOCS_STAMP)
	$(PY) -m sphinx -b html -E -n -W --keep-going -q docs docs/_build/html

# Builds the sdist and the wheel, installs the wheel into a fresh virtual environment outside the
# repository and imports jaxrank there, core alone and with the `train` extra (a few minutes).
package-check: $(STAMP)
	VENV=$(abspath $(VENV)) bash .ci/check_package.sh

# Benchmarks need baselines that the library does not (faiss-cpu): the `bench` extra.
bench-evaluate: $(STAMP)
	$(call uv_install,$(VENV),-e '.[bench]')
	$(PY) -m experiments.benchmarks.evaluate

# Every training step compiled for a TPU v5e and an H100 without either (docs/guide/benchmarks.rst,
# "Accelerators"); about an hour with the largest-batch search.
bench-accelerators: $(ACCEL_STAMP)
	$(ACCEL_VENV)/bin/python -m experiments.benchmarks.accelerators

clean:
	rm -rf $(VENV) $(ACCEL_VENV) *.egg-info .pytest_cache runs docs/_build
