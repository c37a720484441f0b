# The two commands of the README: `make demo` (the main job) and `make test` (the whole suite).
# Each creates the virtual environment .venv when it is absent (or when pyproject.toml changed)
# and installs jaxrank with everything it needs.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL := 2

.PHONY: demo test bench-evaluate clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[train,dev]'
	touch $(STAMP)

# The main job: every loss family trained on the bundled digits, beside an untrained network.
# Rerunning resumes unfinished runs from their checkpoints and reuses finished ones.
demo: $(STAMP)
	$(PY) -m experiments.main --config experiments/configs/digits.py --workdir runs/digits

# Two pytest processes: the multi-device tests need 8 simulated CPU devices, set before JAX starts.
test: $(STAMP)
	$(PY) -m pytest -q tests jaxrank --doctest-modules --ignore=tests/multidevice
	XLA_FLAGS=--xla_force_host_platform_device_count=8 $(PY) -m pytest -q tests/multidevice

# Benchmarks need baselines that the library does not (faiss-cpu): the `bench` extra.
bench-evaluate: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) -m experiments.bench_evaluate

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache runs
