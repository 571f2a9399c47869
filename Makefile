# Set-up and entry points. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BYTECODE := $(VENV)/.bytecode
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: test-fairseq install lock drift-check system-deps demo test test-all bench clean

UV := $(VENV)/bin/uv
# The lock: every dependency's exact version and hashes, for every platform and Python >= 3.10
# (`--universal`). pyproject.toml keeps the ranges for people who pip-install voxanon into their
# own environment; `make lock` re-resolves them, `make drift-check` tries a fresh resolution.
LOCK_INPUTS := pyproject.toml requirements/outside-pyproject.in
LOCK_FLAGS := --extra test --overrides requirements/overrides.txt --universal --python-version 3.10 --generate-hashes

$(PY):
	$(PYTHON) -m venv $(VENV)

$(UV): requirements/bootstrap.txt | $(PY)
	$(PY) -m pip install -q --disable-pip-version-check --require-hashes -r requirements/bootstrap.txt
	touch $(UV)

# Exactly the locked versions (hash-checked, no resolution: the lock is the whole set), then voxanon itself without resolving anything;
# scripts/check_install.py then loads each compiled library and names a pair that does not load.
$(STAMP): pyproject.toml requirements/lock.txt | $(UV)
	VIRTUAL_ENV=$(VENV) $(UV) pip install -q --no-deps --require-hashes -r requirements/lock.txt
	VIRTUAL_ENV=$(VENV) $(UV) pip install -q --no-deps --no-build-isolation -e .
	$(PY) scripts/check_install.py
	touch $(STAMP)

# The environment's bytecode, compiled once (uv, unlike pip, installs none): where PYTHONDONTWRITEBYTECODE is set,
# every process compiled torch's, SciPy's and our own sources again, 7 of the 14 CPU seconds of an anonymise run
# over one utterance (docs/benchmarks.md). A stamp of its own, so that environments installed before it get it too.
$(BYTECODE): $(STAMP)
	$(PY) -W ignore -m compileall -q -j 0 $$($(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") \
	  api pipeline models data_prep eval recipes > /dev/null
	touch $(BYTECODE)

install: $(STAMP) $(BYTECODE)

lock: | $(UV)
	$(UV) pip compile -q $(LOCK_INPUTS) $(LOCK_FLAGS) -o requirements/lock.txt

# Resolves the open ranges afresh (newest releases), installs them in a throw-away venv and
# runs the install check and the default tests there; the committed lock is left as it is.
DRIFT := $(or $(DRIFT_DIR),/tmp/voxanon-drift)
drift-check: | $(UV)
	rm -rf $(DRIFT) && mkdir -p $(DRIFT)
	$(UV) pip compile -q --upgrade $(LOCK_INPUTS) $(LOCK_FLAGS) -o $(DRIFT)/lock.txt
	-diff <(grep -E '^[A-Za-z0-9]' requirements/lock.txt) <(grep -E '^[A-Za-z0-9]' $(DRIFT)/lock.txt)
	$(UV) venv -q --python $(PY) $(DRIFT)/venv
	VIRTUAL_ENV=$(DRIFT)/venv $(UV) pip install -q --no-deps --require-hashes -r $(DRIFT)/lock.txt
	VIRTUAL_ENV=$(DRIFT)/venv $(UV) pip install -q --no-deps --no-build-isolation -e .
	$(DRIFT)/venv/bin/python scripts/check_install.py
	$(DRIFT)/venv/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# Debian packages the tests use: headless Chromium renders the HTML report.
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  else echo "the report test needs Debian's chromium: run 'sudo apt-get install chromium'" >&2; exit 1; fi; }

demo: install
	$(VENV)/bin/voxanon demo

# The suite runs on every core (pytest-xdist), a test file per worker so that module fixtures are built once.
TEST_WORKERS ?= $(shell nproc)
# The fast YAAPT's numba kernels are compiled once before the tests (`voxanon models warm-up`, about 40 s on
# 2 cores, kept in ~/.cache/voxanon/numba), not by each test worker that first needs them.
test: install system-deps
	$(VENV)/bin/voxanon models warm-up
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test-all: install system-deps
	$(PY) -m pytest -q -m ''

# fairseq-fixed builds from source (about 8 minutes on 2 cores), so parity with fairseq is opt-in.
test-fairseq: install
	$(PY) -m pip install -e '.[fairseq]'
	$(PY) -m pytest -q tests/models/test_hubert_fairseq.py

# gpu.py exits 2 with one line on a machine without CUDA; the other figures still run.
bench: install
	$(PY) -m benchmarks.cli
	$(PY) -m benchmarks.mcadams
	$(PY) -m benchmarks.metrics
	$(PY) -m benchmarks.pipeline
	$(PY) -m benchmarks.ray_scaling
	$(PY) -m benchmarks.train_vocoder
	$(PY) -m benchmarks.train_asv
	-$(PY) -m benchmarks.gpu

clean:
	rm -rf $(VENV) voxanon-demo
