# Set-up and entry points. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo test test-all bench clean

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

demo: install
	$(VENV)/bin/voxanon demo

test: install
	$(PY) -m pytest -q

test-all: install
	$(PY) -m pytest -q -m ''

bench: install
	$(PY) benchmarks/mcadams.py

clean:
	rm -rf $(VENV) demo_out
