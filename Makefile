# Set-up and entry points. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: test-fairseq install system-deps demo test test-all bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# resemblyzer declares `webrtcvad`, whose module needs the removed pkg_resources:
# install the binary `webrtcvad-wheels` (same module) and resemblyzer without its deps.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m pip install -q --no-deps 'resemblyzer==0.1.4'
	touch $(STAMP)

install: $(STAMP)

# Debian packages the tests use: headless Chromium renders the HTML report.
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  else echo "the report test needs Debian's chromium: run 'sudo apt-get install chromium'" >&2; exit 1; fi; }

demo: install
	$(VENV)/bin/voxanon demo

test: install system-deps
	$(PY) -m pytest -q

test-all: install system-deps
	$(PY) -m pytest -q -m ''

# fairseq-fixed builds from source (about 8 minutes on 2 cores), so parity with fairseq is opt-in.
test-fairseq: install
	$(PY) -m pip install -e '.[fairseq]'
	$(PY) -m pytest -q tests/test_neural_fairseq.py

# gpu.py exits 2 with one line on a machine without CUDA; the other figures still run.
bench: install
	$(PY) benchmarks/cli.py
	$(PY) benchmarks/mcadams.py
	$(PY) benchmarks/metrics.py
	$(PY) benchmarks/pipeline.py
	$(PY) benchmarks/ray_scaling.py
	$(PY) benchmarks/train_vocoder.py
	$(PY) benchmarks/train_asv.py
	-$(PY) benchmarks/gpu.py

clean:
	rm -rf $(VENV) voxanon-demo
