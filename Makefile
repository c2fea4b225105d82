# kvtrace — build, test, fuzz.
#   make            build build/kvtrace
#   make test       install missing Debian packages, build, run every test: unit tests and
#                   scripts on the normal build and under ASan+UBSan, plus a short fuzz run;
#                   ends with one combined "N passed, N failed" line
#   make test-asan  only the ASan+UBSan build (build-asan/) and its tests
#   make fuzz       libFuzzer on the trace validation layer (FUZZ_SECONDS=60)
#   make demo       set-up, build, and the pipeline as far as it exists (see README)
#   make deps       install missing Debian packages only

CC      ?= cc
BUILD   ?= build
PKGS    := hdf5 openblas lapacke
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 \
           -Wno-format-nonliteral -Wvla
CPPFLAGS := -std=c11 -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L -I. $(PKG_CFLAGS)
LDLIBS  := $(PKG_LIBS) -lm -lpthread
SAN     ?=
ifeq ($(SAN),1)
  CFLAGS  := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
  LDFLAGS += -fsanitize=address,undefined
endif

LIB_DIRS := core synth capture sim policies analysis plots
LIB_SRC  := $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c)) $(filter-out cli/main.c,$(wildcard cli/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
LIB      := $(BUILD)/libkvtrace.a
BIN      := $(BUILD)/kvtrace

TEST_SRC := $(wildcard tests/unit/test_*.c)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all deps test check tests test-asan fuzz fuzz-bin demo clean
all: $(BIN)

deps:
	@scripts/install-deps.sh

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^

$(BIN): $(BUILD)/obj/cli/main.o $(LIB)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/tests/%: tests/unit/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) -Wno-missing-prototypes $< $(LIB) $(LDFLAGS) \
	    $(shell pkg-config --libs cmocka 2>/dev/null) $(LDLIBS) -o $@

tests: $(BIN) $(TEST_BIN)

# test, test-asan and fuzz re-run make after deps so that pkg-config sees new packages
test: deps
	@$(MAKE) --no-print-directory check

check:
	@$(MAKE) --no-print-directory tests
	@$(MAKE) --no-print-directory tests BUILD=build-asan SAN=1
	@$(MAKE) --no-print-directory fuzz-bin
	@FUZZ_BIN=$(FUZZ_BIN) FUZZ_SMOKE_SECONDS=10 tests/run_all.sh build build-asan

test-asan: deps
	@$(MAKE) --no-print-directory tests BUILD=build-asan SAN=1
	@tests/run_all.sh build-asan

FUZZ_SECONDS ?= 60
FUZZ_BIN := build-fuzz/fuzz_trace_validate
FUZZ_SRC := $(wildcard tests/fuzz/*.c) $(filter core/%,$(LIB_SRC))
fuzz-bin: $(FUZZ_BIN)
$(FUZZ_BIN): $(FUZZ_SRC) $(wildcard core/*.h tests/fuzz/*.h)
	@mkdir -p build-fuzz
	clang $(CPPFLAGS) -g -O1 -fsanitize=fuzzer,address,undefined $(FUZZ_SRC) $(LDLIBS) -o $@

fuzz: deps
	@$(MAKE) --no-print-directory fuzz-bin
	@mkdir -p build-fuzz/corpus
	/usr/bin/python3 tests/fuzz/make_seeds.py build-fuzz/corpus
	$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -artifact_prefix=build-fuzz/ \
	    build-fuzz/corpus

demo: deps
	@$(MAKE) --no-print-directory all
	@scripts/demo.sh

clean:
	rm -rf build build-asan build-fuzz

-include $(LIB_OBJ:.o=.d) $(BUILD)/obj/cli/main.d
