# kvtrace — build, test, fuzz.
#   make            build build/kvtrace
#   make test       install missing Debian packages, build, run every test
#   make test-asan  the same tests under AddressSanitizer + UBSan (build-asan/)
#   make fuzz       libFuzzer on the trace validation layer (FUZZ_SECONDS=60)
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

.PHONY: all deps test test-run test-asan fuzz clean
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

# test and test-asan re-run make after deps so that pkg-config sees the new packages
test: deps
	@$(MAKE) --no-print-directory test-run

test-asan: deps
	@$(MAKE) --no-print-directory test-run BUILD=build-asan SAN=1

test-run: $(BIN) $(TEST_BIN)
	@tests/run_all.sh $(BUILD)

FUZZ_SECONDS ?= 60
FUZZ_SRC := tests/fuzz/fuzz_trace_validate.c $(filter core/%,$(LIB_SRC))
fuzz: deps
	@mkdir -p build-fuzz/corpus
	clang $(CPPFLAGS) -g -O1 -fsanitize=fuzzer,address,undefined $(FUZZ_SRC) $(LDLIBS) \
	    -o build-fuzz/fuzz_trace_validate
	build-fuzz/fuzz_trace_validate -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 build-fuzz/corpus

clean:
	rm -rf build build-asan build-fuzz

-include $(LIB_OBJ:.o=.d) $(BUILD)/obj/cli/main.d
