# kvtrace — build, test, fuzz.
#   make            build build/kvtrace
#   make test       install missing Debian packages, build, run every test: unit tests and
#                   scripts on the normal build and under ASan+UBSan, plus a short run of each fuzz harness;
#                   ends with one combined "N passed, N failed, N skipped" line (each skip's reason
#                   printed once above it). The model, stories260K.gguf, is found as make demo finds it
#                   ($KVTRACE_MODEL_DIR, ../shared/models, ~/.cache/kvtrace, else downloaded, sha256
#                   checked); everything else the tests need is made from it in build/testmodels/.
#                   Without it make test fails with one line saying what to put where;
#                   make test SKIP_MODEL_TESTS=1 runs without it, the model tests reported skipped
#   make test-asan  only the ASan+UBSan build (build-asan/) and its tests
#   make crosscheck the test models made from the GGUF against ../shared/models (skipped without it)
#   make fuzz       libFuzzer on the trace validation layer, the GGUF reader, the
#                   token-file/tokenizer readers, the safetensors reader, HF config.json and
#                   tokenizer.json, and our CSV reader (FUZZ_SECONDS=60 each)
#   make demo       set-up, build, and the pipeline as far as it exists (see README)
#   make bench      capture and sim throughput, peak RSS (flat in T with eviction inside the run),
#                   GEMM/attention rate vs OpenBLAS sgemm, the fixed split of the CPU products vs
#                   OpenBLAS's own threading (bench/bench_split.sh: docs/reproducibility.md),
#                   quantised weights kept against widened on load, per type (bench/bench_quant.sh),
#                   load time and capture rate of a BF16 Hugging Face directory (llama-3.2-1b),
#                   tokenize MB/s on a 10 MB text vs the reference encoders, ids checked identical
#                   score expressions vs the built-ins they restate, ns per candidate (at most 2x)
#                   Python policies vs the same policies in C: overhead per call and per candidate
#                   the baseline table: every row against its baseline (sgemm, a key read, llama.cpp on the
#                   same GGUFs, PyTorch 2.13 peers of sim and capture, kvpress per configuration) and the
#                   growth exponents, one markdown table at the end (bench/bench_table.py)
#                   (bench/bench_simT.py, run alone: sim with the recorded reference against recomputing it)
#   make bench-peers kvpress 0.5.5's own pipeline (transformers, the same GGUF) beside kvtrace's in-model
#                   eviction (capture --evict-until): kept sets, answers, accuracy and wall time per press on a
#                   niah sub-grid (scripts/bench-peers.sh; about 6 minutes on 2 cores)
#   make wheel      the Python package (bindings/python, docs/python.md) as a wheel in BUILD/dist
#   make install    kvtrace (and the CUDA backend when built) into PREFIX/bin, the plug-in headers
#                   into PREFIX/include/kvtrace, kvtrace.pc into PREFIX/lib/pkgconfig
#                   (PREFIX=/usr/local; DESTDIR is honoured; docs/plugins.md)
#   make deps       install missing Debian packages only (and, for nvcc without cuBLAS, cuBLAS from PyPI)
#   make bench-deps make deps, then the peers of make bench: the test venv (torch 2.13, transformers), node-llama-cpp
#                   (llama.cpp's prebuilt CPU binaries), kvpress's wheel (bench/bench_deps.sh; not needed by make test)
#   make test-gpu   the CUDA kernels against their CPU references (skips without a GPU)
#   make bench-gpu  capture rate and device memory on the GPU (skips without a GPU)
#   (build/libkvtrace_cuda.so, the CUDA backend, is built by make whenever nvcc and cuBLAS are found;
#   sim runs under mpirun when OpenMPI's mpicc is found: docs/mpi.md)

CC      ?= cc
.DEFAULT_GOAL := all
BUILD   ?= build
PKGS    := hdf5 openblas lapacke jansson libcrypto libpcre2-8 libutf8proc
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
VEC     := -fno-trapping-math -ffp-contract=off -fvect-cost-model=dynamic
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 \
           -Wno-format-nonliteral -Wvla
CPPFLAGS := -std=c11 -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L -I. -Iinclude $(PKG_CFLAGS)
LDLIBS  := $(PKG_LIBS) -lm -lpthread -ldl
# Python policies (--plugin FILE.py, docs/python-policies.md): built when Debian's python3 has its
# embedding library and numpy; pinned to that interpreter (not a python3 earlier on PATH)
PYTHON  ?= /usr/bin/python3
PY_CONFIG := $(wildcard $(PYTHON)-config)
PY_OK   := $(if $(PY_CONFIG),$(shell $(PYTHON) -c 'import numpy' 2>/dev/null && echo yes))
ifeq ($(PY_OK),yes)
  PY_CFLAGS := $(patsubst -I%,-isystem %,$(shell $(PY_CONFIG) --includes)) -DKV_HAVE_PYTHON \
               -DKV_PYTHON_EXE='"$(PYTHON)"' -DKV_PYTHON_HOME='"$(shell $(PY_CONFIG) --prefix)"'
  LDLIBS    += $(shell $(PY_CONFIG) --embed --ldflags)
endif
# MPI (mpirun -n R kvtrace sim ..., docs/mpi.md): built when OpenMPI's mpicc is found (make deps
# installs libopenmpi-dev and openmpi-bin); a plain build otherwise. Only core/kv_mpi.c sees the
# MPI headers. CI runs as root: mpirun then needs OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1.
MPICC   ?= $(shell command -v mpicc 2>/dev/null)
MPI_OK  := $(if $(MPICC),$(shell $(MPICC) --showme:link >/dev/null 2>&1 && echo yes))
ifeq ($(MPI_OK),yes)
  MPI_CFLAGS := $(patsubst -I%,-isystem %,$(shell $(MPICC) --showme:compile)) -DKV_HAVE_MPI
  LDLIBS     += $(shell $(MPICC) --showme:link)
endif
SAN     ?=
ifeq ($(SAN),1)
  CFLAGS  := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
  LDFLAGS += -fsanitize=address,undefined
endif

LIB_DIRS := core trace provenance model model/formats model/tokenizer synth results study capture sim policies allocators plan expr python userpol analysis plots fidelity search
LIB_SRC  := $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c)) $(filter-out cli/main.c,$(wildcard cli/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
LIB      := $(BUILD)/libkvtrace.a
BIN      := $(BUILD)/kvtrace

# ---- the CUDA backend (docs/cuda.md): a shared object opened with dlopen for
# --device cuda, built whenever nvcc is found with cuBLAS; Hopper sm_90 code plus PTX.
# It is built once, in build/; other build directories link to it.
NVCC ?= $(firstword $(wildcard /usr/local/cuda/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
# cuBLAS: the toolkit's own, or (an image with nvcc alone) the one make deps took from PyPI into the
# user cache (scripts/fetch-cublas.sh); with neither the backend is left out, as without nvcc
CUDA_HOME := $(patsubst %/bin/nvcc,%,$(realpath $(NVCC)))
ifndef CUBLAS_HOME
  CUBLAS_HOME := $(shell scripts/fetch-cublas.sh --home)
endif
CUBLAS_FLAGS :=
CUBLAS_LINK  := -lcublas
ifeq ($(wildcard $(addsuffix /include/cublas_v2.h,$(CUDA_HOME)) $(addsuffix /targets/*/include/cublas_v2.h,$(CUDA_HOME))),)
  ifneq ($(wildcard $(CUBLAS_HOME)/include/cublas_v2.h),)
    CUBLAS_FLAGS := -I$(CUBLAS_HOME)/include
    CUBLAS_LINK  := -L$(CUBLAS_HOME)/lib -l:libcublas.so.13 -Xlinker -rpath=$(CUBLAS_HOME)/lib
  else
    NVCC :=
  endif
endif
CUDA_SO      := build/libkvtrace_cuda.so
CUDA_SRC     := $(wildcard model/cuda/*.cu)
CUDA_OBJ     := $(CUDA_SRC:%.cu=build/cuda/%.o) build/cuda/kv_error.o
CUDA_ARCH    ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVFLAGS      := -O2 -g -std=c++17 -I. -Iinclude $(CUBLAS_FLAGS) $(CUDA_ARCH) -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra
CUDA_TARGETS :=
ifneq ($(NVCC),)
CUDA_TARGETS := $(BUILD)/libkvtrace_cuda.so
build/cuda/%.o: %.cu model/cuda/kvcuda.h model/cuda/cuda_check.h core/kv_error.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@
build/cuda/kv_error.o: core/kv_error.c core/kv_error.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -O2 -g -fPIC -fvisibility=hidden $(WARN) -c $< -o $@
$(CUDA_SO): $(CUDA_OBJ)
	$(NVCC) -shared $(CUDA_ARCH) -o $@ $^ $(CUBLAS_LINK)
ifneq ($(BUILD),build)
$(BUILD)/libkvtrace_cuda.so: $(CUDA_SO)
	@mkdir -p $(BUILD)
	ln -sf $(abspath $(CUDA_SO)) $@
endif
endif

# GPU validation programs: compiled with the tests (so CI compiles them), run
# only by make test-gpu (they skip, saying why, without a usable GPU)
GPU_BIN := $(patsubst tests/gpu/%.c,$(BUILD)/gpu/%,$(wildcard tests/gpu/*.c))

# small programs the real-model tests drive (tests/tools/)
TOOL_BIN := $(patsubst tests/tools/%.c,$(BUILD)/tools/%,$(wildcard tests/tools/*.c))

TEST_SRC := $(wildcard tests/unit/test_*.c)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: FORCE all deps bench-deps docs test check tests test-asan crosscheck fuzz fuzz-bin demo findings bench bench-peers wheel clean test-gpu bench-gpu install
all: $(BIN) $(CUDA_TARGETS)

deps:
	@scripts/install-deps.sh
	@scripts/fetch-cublas.sh

bench-deps: deps
	@$(MAKE) --no-print-directory all
	@bench/bench_deps.sh $(BUILD)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(VEC) $(WARN) -MMD -MP -c $< -o $@

# the CPU kernels split their products over OpenMP threads (model/backend_cpu.c)
$(BUILD)/obj/model/backend_cpu.o: CFLAGS += -fopenmp
LDLIBS  += -fopenmp # (not the fuzz harnesses: they leave backend_cpu.c out, and clang would want libomp)

# pyplug.o is rebuilt when the Python probe's answer changes (e.g. make deps installed libpython3-dev)
$(BUILD)/obj/python/pyplug.o: CPPFLAGS += $(PY_CFLAGS)
$(BUILD)/obj/python/pyplug.o: $(BUILD)/obj/python/probe
$(BUILD)/obj/python/probe: FORCE
	@mkdir -p $(dir $@)
	@echo "python=$(PY_OK) $(PYTHON)" | cmp -s - $@ || echo "python=$(PY_OK) $(PYTHON)" > $@
FORCE:

# kv_mpi.o likewise follows the MPI probe (make deps installed OpenMPI)
$(BUILD)/obj/core/kv_mpi.o: CPPFLAGS += $(MPI_CFLAGS)
$(BUILD)/obj/core/kv_mpi.o: $(BUILD)/obj/core/mpi_probe
$(BUILD)/obj/core/mpi_probe: FORCE
	@mkdir -p $(dir $@)
	@echo "mpi=$(MPI_OK) $(MPICC)" | cmp -s - $@ || echo "mpi=$(MPI_OK) $(MPICC)" > $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	@rm -f $@ # anew: members of files since renamed or removed must not linger
	$(AR) rcs $@ $^

$(BIN): $(BUILD)/obj/cli/main.o $(LIB)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/tests/%: tests/unit/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) -Wno-missing-prototypes $< $(LIB) $(LDFLAGS) \
	    $(shell pkg-config --libs cmocka 2>/dev/null) $(LDLIBS) -o $@

tests: $(BIN) $(TEST_BIN) $(CUDA_TARGETS) $(GPU_BIN) $(TOOL_BIN) $(BUILD)/emul/libkvcuda_emul.so

$(BUILD)/tools/%: tests/tools/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) -Wno-missing-prototypes $< $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

# a host emulation of the CUDA backend's ABI: CI runs the --device cuda path with it
EMUL_SRC := tests/emul/kvcuda_emul.c $(addprefix core/,attn_causal.c attn_colsum.c softmax.c half.c rope.c kv_error.c)
$(BUILD)/emul/libkvcuda_emul.so: $(EMUL_SRC) model/cuda/kvcuda.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -O2 -g -fPIC -shared -fvisibility=hidden $(VEC) $(WARN) $(EMUL_SRC) $(PKG_LIBS) -lm -o $@

$(BUILD)/gpu/%: tests/gpu/%.c $(wildcard tests/gpu/*.h) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) -Wno-missing-prototypes $< $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

test-gpu: all $(GPU_BIN)
	@tests/gpu/run.sh $(BUILD)

bench-gpu: all $(GPU_BIN)
	@bench/bench_gpu.sh $(BUILD)

# test, test-asan and fuzz re-run make after deps so that pkg-config sees new packages
test: deps
	@$(MAKE) --no-print-directory check

# make test builds on every core unless make was given -j itself (then its jobserver is shared)
TEST_J = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(shell nproc 2>/dev/null || echo 1))

check:
	@$(MAKE) --no-print-directory $(TEST_J) tests
	@$(MAKE) --no-print-directory $(TEST_J) tests BUILD=build-asan SAN=1
	@$(MAKE) --no-print-directory $(TEST_J) fuzz-bin
	@FUZZERS="$(FUZZERS)" FUZZ_SMOKE_SECONDS=5 SKIP_MODEL_TESTS="$(SKIP_MODEL_TESTS)" tests/run_all.sh build build-asan

test-asan: deps
	@$(MAKE) --no-print-directory $(TEST_J) tests BUILD=build-asan SAN=1
	@SKIP_MODEL_TESTS="$(SKIP_MODEL_TESTS)" tests/run_all.sh build-asan

crosscheck: deps
	@tests/run_all.sh --crosscheck

FUZZ_SECONDS ?= 60
FUZZERS    := trace_validate gguf tokens safetensors hf_config hf_tokenizer csv
FUZZ_BINS  := $(FUZZERS:%=build-fuzz/fuzz_%)
CORE_SRC   := $(filter core/% trace/%,$(LIB_SRC))
FUZZ_FLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
# the byte-level BPE tokenizer (tokenizer.json, GGUF gpt2), under every reader of tokenizers
# (a file listed twice, core/utf8.c with CORE_SRC, is compiled once: the recipe sorts the list)
FUZZ_BPE_SRC    := model/tokenizer/bpe.c model/tokenizer/bpe_encode.c model/tokenizer/bpe_hf.c \
                   model/tokenizer/pretok.c model/tokenizer/tokjson_check.c model/tokenizer/nfc_map.c \
                   model/tokenizer/spm_hf.c core/utf8.c
FUZZ_trace_validate_SRC := $(wildcard tests/fuzz/*.c) $(CORE_SRC)
FUZZ_gguf_SRC   := $(wildcard tests/fuzz_gguf/*.c) $(CORE_SRC) $(wildcard model/formats/*.c) model/model.c model/arch.c model/weights.c \
                   model/tokenizer/vocab.c model/tokenizer/vocab_hf.c model/tokenizer/vocab_hf_chat.c $(FUZZ_BPE_SRC)
FUZZ_tokens_SRC := tests/fuzz_tokens/fuzz_tokens.c model/tokenizer/vocab.c model/tokenizer/tokenizer.c \
                   model/tokenizer/token_file.c core/kv_error.c core/fileopen.c $(FUZZ_BPE_SRC)
FUZZ_safetensors_SRC := $(wildcard tests/fuzz_safetensors/*.c) model/formats/safetensors.c core/filemap.c core/fileopen.c \
                   core/half.c core/kv_error.c
FUZZ_hf_config_SRC := tests/fuzz_hf_config/fuzz_hf_config.c model/formats/hf_config.c model/arch.c model/model.c \
                   model/tokenizer/vocab.c core/rope.c core/kv_error.c core/fileopen.c $(FUZZ_BPE_SRC)
FUZZ_hf_tokenizer_SRC := tests/fuzz_hf_tokenizer/fuzz_hf_tokenizer.c model/tokenizer/vocab_hf.c model/tokenizer/vocab_hf_chat.c \
                   model/tokenizer/vocab.c model/tokenizer/tokenizer.c core/kv_error.c core/fileopen.c $(FUZZ_BPE_SRC)
FUZZ_csv_SRC    := tests/fuzz_csv/fuzz_csv.c core/csv.c core/kv_error.c core/fileopen.c

fuzz-bin: $(FUZZ_BINS)
.SECONDEXPANSION:
$(FUZZ_BINS): build-fuzz/fuzz_%: $$(FUZZ_$$*_SRC) $(wildcard core/*.h trace/*.h model/*.h model/*/*.h tests/*.h tests/fuzz*/*.h)
	@mkdir -p build-fuzz
	clang $(CPPFLAGS) $(FUZZ_FLAGS) $(sort $(FUZZ_$*_SRC)) $(filter-out -fopenmp,$(LDLIBS)) -o $@

# every harness for FUZZ_SECONDS each; crash inputs are kept in build-fuzz/
fuzz: deps
	@$(MAKE) --no-print-directory fuzz-bin
	@for f in $(FUZZERS); do echo "== fuzz_$$f ($(FUZZ_SECONDS) s)"; \
	    tests/fuzz_run.sh $$f $(FUZZ_SECONDS) build-fuzz || exit 1; done

$(BUILD)/bench_%: bench/bench_%.c $(LIB)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(VEC) $(WARN) $< $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

# docs/trace.md's dataset table, rewritten from trace/trace_schema.c (scripts/doc_tables.py; a test checks it)
docs: all
	@scripts/doc_tables.py $(BUILD)/kvtrace --write

# the bench runs under the machine's own OpenBLAS kernel choice (the test run pins it: docs/reproducibility.md)
BENCH_ENV = env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE BUILD=$(BUILD)
bench: bench-deps
	@$(MAKE) --no-print-directory all $(BUILD)/bench_sgemm $(BUILD)/bench_keyread $(BUILD)/bench_split
	@$(BENCH_ENV) bench/bench_split.sh $(BUILD)
	@$(BENCH_ENV) bench/bench_quant.sh $(BUILD)
	@$(BENCH_ENV) bench/bench_capture.sh
	@$(BENCH_ENV) bench/bench_evict_rss.sh
	@$(BENCH_ENV) /usr/bin/python3 bench/bench_hf.py
	@$(BENCH_ENV) /usr/bin/python3 bench/bench_sim.py
	@$(BENCH_ENV) /usr/bin/python3 bench/bench_alloc.py
	@$(BENCH_ENV) /usr/bin/python3 bench/bench_expr.py
	@$(BENCH_ENV) /usr/bin/python3 bench/bench_pyplugin.py
	@$(BENCH_ENV) /usr/bin/python3 bench/bench_tokenize.py
	@$(BENCH_ENV) /usr/bin/python3 bench/bench_mpi.py
	@$(BENCH_ENV) /usr/bin/python3 bench/bench_table.py

demo: deps
	@$(MAKE) --no-print-directory all
	@scripts/demo.sh

# docs/findings.md's study on SmolLM2-135M-Instruct in its resumable pieces (out/findings), then its tables
bench-peers: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) scripts/bench-peers.sh

# pip wheel builds in an isolated environment, fetching setuptools from the index (PyPI or pip's cache)
wheel:
	@rm -rf $(BUILD)/dist && mkdir -p $(BUILD)/dist
	@python3 -m pip wheel --disable-pip-version-check -q --no-deps -w $(BUILD)/dist ./bindings/python
	@ls $(BUILD)/dist/*.whl

findings: deps
	@$(MAKE) --no-print-directory all
	@scripts/findings.sh --resume
	@/usr/bin/python3 scripts/findings_tables.py out/findings

# the binary, the public headers a plug-in builds against, and their pkg-config file
PREFIX ?= /usr/local
KV_VERSION := $(shell sed -n 's/.*KVTRACE_VERSION "\(.*\)"/\1/p' core/version.h)
KV_ABI     := $(shell sed -n 's/.*define KVTRACE_POLICY_ABI \([0-9]*\)u.*/\1/p' include/kvtrace/policy.h)
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include/kvtrace $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/kvtrace
	$(if $(CUDA_TARGETS),install -m 755 $(CUDA_SO) $(DESTDIR)$(PREFIX)/bin/)
	install -m 644 include/kvtrace/*.h $(DESTDIR)$(PREFIX)/include/kvtrace/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(KV_VERSION)|' -e 's|@ABI@|$(KV_ABI)|' include/kvtrace.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/kvtrace.pc

clean:
	rm -rf build build-asan build-fuzz

-include $(LIB_OBJ:.o=.d) $(BUILD)/obj/cli/main.d
