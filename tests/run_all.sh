#!/bin/sh
# Runs every test program and script and ends with one combined count.
#   tests/run_all.sh BUILD_DIR [BUILD_DIR ...]
#   tests/run_all.sh --crosscheck      (make crosscheck: tests/crosscheck_shared.py alone)
# For each build directory (e.g. build and the ASan build build-asan) it runs
# the unit tests and the scripts with that build's kvtrace (the legs run at the
# same time when there is more than one core; KVTRACE_TEST_JOBS=1: one after
# another); then, for each harness named in FUZZERS, a short libFuzzer run
# (FUZZ_SMOKE_SECONDS, default 5; when the legs run at once, right after the
# first leg, beside the others). Each result line ends with its wall time.
#
# The test model: stories260K.gguf, found as the demo finds the default model
# (tests/lib/find_model.sh: $KVTRACE_MODEL_DIR, a checkout's ../shared/models,
# the user cache, then kvtrace's checked download). Everything else the tests
# need, the llama2.c checkpoint and tokenizer and the golden reference values,
# tests/lib/testmodels.py makes from that one file into
# FIRST_BUILD_DIR/testmodels/GGUF_SHA256-GENERATOR_SHA256/ (made once, never
# stale), and the run's KVTRACE_MODEL_DIR is that directory. Without the model
# the run fails at once with one line saying what to put where;
# SKIP_MODEL_TESTS=1 runs without it and the tests that need it report skips.
#
# Counting: unit tests are cmocka programs in BUILD_DIR/tests (TAP output);
# scripts in tests/scripts/*.sh and tests/scripts/*.py print TAP lines too
# ("ok N - ...", "not ok N - ..."). A line with a "# SKIP" directive (cmocka's
# skip() prints "not ok N # SKIP name" after the test's "# skip: REASON" line;
# the scripts "ok N - what # SKIP REASON") counts as skipped, neither passed nor
# failed, and each reason is printed once at the end. A program that crashes or
# exits non-zero without a "not ok" line counts as one failure of its own.
# The last line is "N passed, N failed, N skipped"; the exit status is 0 when
# nothing failed.
set -u
[ $# -ge 1 ] || set -- build
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export ROOT
export CMOCKA_MESSAGE_OUTPUT=TAP
PY=/usr/bin/python3
LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT
: >"$LOG/skips"
passed=0
failed=0
skipped=0

# The real-model part (tests/real/: SmolLM2-135M-Instruct against transformers, the gguf package and
# HF tokenizers), in the first build's leg only, with the test venv's Python (tests/lib/real_setup.sh);
# offline, each of its scripts fails with one line saying what to put where.
. "$ROOT/tests/lib/real_setup.sh"
REAL_LLAMACPP= REAL_LLAMACPP_WHY= REAL_PY= REAL_MODEL= REAL_WHY= REAL_SKIP="SKIP_MODEL_TESTS=1: the model tests are skipped"

WORK=$LOG  # where run_one keeps its output and skip reasons: a leg's own folder when legs run at once

tap_count() { # output file, name: "PASSED FAILED SKIPPED" (tests/lib/tap_count.awk)
    awk -v name="$2" -v skips="$WORK/skips" -f "$ROOT/tests/lib/tap_count.awk" "$1"
}

run_one() { # name, command...
    name=$1
    shift
    out="$WORK/out"
    t0=$(date +%s)
    "$@" >"$out" 2>&1
    rc=$?
    took=$(($(date +%s) - t0))
    set -- $(tap_count "$out" "$name")
    p=$1 f=$2 s=$3
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        echo "not ok - $name exited with status $rc" >>"$out"
    fi
    note=
    [ "$s" -eq 0 ] || note=", $s skipped"
    note="$note ($took s)"
    if [ "$f" -gt 0 ]; then
        echo "== $name: $p passed, $f failed$note"
        grep -v '^ok ' "$out" | sed 's/^/   /' | head -60
    else
        echo "== $name: $p passed$note"
    fi
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + s))
}

summary() {
    if [ "$skipped" -gt 0 ]; then
        echo "skipped, by reason (count: reason, then where):"
        sort "$LOG/skips" | awk -F '\t' '
            $1 != r { if (NR > 1) printf "%d: %s\n    in %s\n", n, r, w; r = $1; n = 0; w = ""; last = "" }
            { n++; if ($2 != last) { w = w (w == "" ? "" : ", ") $2; last = $2 } }
            END { printf "%d: %s\n    in %s\n", n, r, w }' | sed 's/^/  /'
    fi
    echo "$passed passed, $failed failed, $skipped skipped"
    [ "$failed" -eq 0 ]
}

if [ "$1" = "--crosscheck" ]; then
    run_one "crosscheck_shared.py" "$PY" "$ROOT/tests/crosscheck_shared.py"
    summary
    exit
fi

# ---- the test model and the files made from it
if [ "${SKIP_MODEL_TESTS:-0}" = 1 ]; then
    unset KVTRACE_MODEL_DIR
    echo "# SKIP_MODEL_TESTS=1: the tests that need stories260K.gguf are skipped"
else
    . "$ROOT/tests/lib/find_model.sh"
    if ! find_model "$ROOT/$1/kvtrace"; then
        echo "make test: $MODEL_WHY; or run make test SKIP_MODEL_TESTS=1 to skip the tests that need it" >&2
        exit 1
    fi
    gguf_sha=$(sha256sum "$MODEL_GGUF" | cut -c1-64)
    gen_sha=$(cd "$ROOT/tests/lib" && cat testmodels.py hfmodel.py ggufio.py | sha256sum | cut -c1-16)
    KVTRACE_MODEL_DIR="$ROOT/$1/testmodels/$gguf_sha-$gen_sha"
    if [ ! -d "$KVTRACE_MODEL_DIR" ]; then
        mkdir -p "$ROOT/$1/testmodels"
        if ! "$PY" "$ROOT/tests/lib/testmodels.py" "$MODEL_GGUF" "$KVTRACE_MODEL_DIR" 2>"$LOG/gen"; then
            echo "make test: cannot make the test models from $MODEL_GGUF: $(tail -n 1 "$LOG/gen")" >&2
            exit 1
        fi
    fi
    export KVTRACE_MODEL_DIR
    echo "# test models: $KVTRACE_MODEL_DIR (made from $MODEL_GGUF)"
    t0=$(date +%s) REAL_SKIP=
    if real_setup "$1"; then
        llamacpp_setup "$1" || echo "# the llama.cpp test cannot run: $REAL_LLAMACPP_WHY"
        echo "# real-model tests: $REAL_MODEL, $REAL_PY, llama.cpp in ${REAL_LLAMACPP:-(none)} ($(($(date +%s) - t0)) s to set up)"
    else
        echo "# real-model tests cannot run: $REAL_WHY"
    fi
fi

# The OpenBLAS kernels the scripts tagged blas (a line "# tags: blas") run under once more, each with
# OPENBLAS_NUM_THREADS 1 and 2 (Sandybridge, the pre-AVX2 kernel and the slowest, with 1 only), in the
# first build's leg (the normal build): results must not depend on the kernel OpenBLAS picks
# (docs/reproducibility.md). SkylakeX needs avx512f.
BLAS_KERNELS="Haswell SkylakeX Sandybridge"
FIRST_BUILD=$1

jobs_of() { # build directory: its tests, one per line "KIND PATH" (unit, sh, py, blas:KERNEL:THREADS), in run order
    for t in "$ROOT/$1"/tests/test_*; do
        [ -x "$t" ] && echo "unit $t"
    done
    for s in "$ROOT"/tests/scripts/*.sh; do
        [ -f "$s" ] && echo "sh $s"
    done
    for s in "$ROOT"/tests/scripts/*.py; do
        [ -f "$s" ] && echo "py $s"
    done
    [ "$1" = "$FIRST_BUILD" ] || return 0
    for s in "$ROOT"/tests/real/test_*.py; do
        [ -f "$s" ] && echo "real $s"
    done
    for k in $BLAS_KERNELS; do
        for n in 1 2; do
            [ "$k:$n" = Sandybridge:2 ] && continue # the pre-AVX2 kernel once, on one thread: CI's time
            grep -l '^# tags:.*\bblas\b' "$ROOT"/tests/scripts/*.py | sed "s|^|blas:$k:$n |"
        done
    done
}

blas_job() { # kernel, threads, script: the script under that kernel, or a skip saying why not
    if [ "$1" = SkylakeX ] && ! grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
        echo "ok 1 - $(basename "$3") under OPENBLAS_CORETYPE=SkylakeX # SKIP this CPU has no avx512f"
        return 0
    fi
    OPENBLAS_CORETYPE=$1 OPENBLAS_NUM_THREADS=$2 "$PY" "$3"
}

run_job() { # build directory, kind, path: one test with that build's kvtrace
    BUILD=$1
    KVTRACE="$ROOT/$BUILD/kvtrace"
    export KVTRACE BUILD
    case $2 in
        unit) run_one "$BUILD/$(basename "$3")" "$3" ;;
        sh) run_one "$BUILD: $(basename "$3")" sh "$3" ;;
        real)
            if [ -n "$REAL_PY" ]; then
                run_one "$BUILD: real/$(basename "$3")" env KVTRACE_SMOLLM2="$REAL_MODEL" KVTRACE_LLAMACPP="$REAL_LLAMACPP" \
                    KVTRACE_LLAMACPP_WHY="$REAL_LLAMACPP_WHY" "$REAL_PY" "$3"
            elif [ -n "$REAL_SKIP" ]; then
                run_one "$BUILD: real/$(basename "$3")" echo "ok 1 - $(basename "$3") # SKIP $REAL_SKIP"
            else
                run_one "$BUILD: real/$(basename "$3")" echo "not ok 1 - $(basename "$3"): $REAL_WHY"
            fi ;;
        blas:*)
            k=${2#blas:}
            run_one "$BUILD: $(basename "$3") [OPENBLAS_CORETYPE=${k%:*} OPENBLAS_NUM_THREADS=${k#*:}]" \
                blas_job "${k%:*}" "${k#*:}" "$3" ;;
        *) run_one "$BUILD: $(basename "$3")" "$PY" "$3" ;;
    esac
}

leg() { # build directory: its unit tests and scripts, run with that build's kvtrace
    jobs_of "$1" >"$WORK/jobs"
    while read -r kind path <&3; do # the list on fd 3: a test reading its stdin cannot eat it
        run_job "$1" "$kind" "$path"
    done 3<"$WORK/jobs"
}

claim() { # leg number, line: true for the one worker that takes that test (mkdir is atomic)
    mkdir "$LOG/claims/$1.$2" 2>/dev/null
}

worker() { # own leg number, then every build directory: its own leg's tests in order, then
    # (after the fuzz runs, for the first) the tests no worker has started yet, from the end of the
    # others' lists: a worker that ends early takes over the tail of a longer leg
    own=$1
    shift
    i=0
    for b in "$@"; do
        i=$((i + 1))
        [ "$i" -eq "$own" ] || continue
        n=0
        while read -r kind path <&3; do
            n=$((n + 1))
            claim "$i" "$n" && run_job "$b" "$kind" "$path"
        done 3<"$LOG/jobs$i"
    done
    [ "$own" -eq 1 ] && fuzz_all
    i=0
    for b in "$@"; do
        i=$((i + 1))
        [ "$i" -eq "$own" ] && continue
        n=$(wc -l <"$LOG/jobs$i")
        while [ "$n" -gt 0 ]; do
            line=$(sed -n "${n}p" "$LOG/jobs$i")
            claim "$i" "$n" && run_job "$b" "${line%% *}" "${line#* }"
            n=$((n - 1))
        done
    done
}

fuzz_all() { # a short run of every fuzz harness in FUZZERS (after its regression inputs)
    secs=${FUZZ_SMOKE_SECONDS:-5}
    for f in ${FUZZERS:-}; do
        fuzz_smoke() {
            if "$ROOT/tests/fuzz_run.sh" "$1" "$secs" "$LOG" >"$LOG/fuzz" 2>&1; then
                echo "ok 1 - fuzz_$1 ran $secs s clean: $(grep -o 'Done [0-9]* runs' "$LOG/fuzz")"
            else
                echo "not ok 1 - fuzz_$1 found a failure"
                tail -40 "$LOG/fuzz"
                cat "$LOG"/regressions_*.log 2>/dev/null | tail -20
            fi
        }
        run_one "fuzz_$f smoke ($secs s)" fuzz_smoke "$f"
    done
}

# The legs (one per build directory) are independent: with more than one core
# they run at the same time, one worker per leg (KVTRACE_TEST_JOBS=1 runs them
# one after another). The first worker prints as it goes; the others print, in
# order, when they end. The fuzz runs follow the first worker's own leg (the
# normal build, the shorter: make test's ASan leg takes longer); then a worker
# whose own tests are done takes the tests nobody has started from the end of
# the other legs' lists, so the legs end together rather than one waiting on
# the other. Each test runs once, under its own build's kvtrace, whoever runs it.
jobs=${KVTRACE_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
if [ $# -gt 1 ] && [ "$jobs" -gt 1 ]; then
    # the reference tokenizers are fetched once, before the legs could race to the same cache
    "$ROOT/tests/lib/fetch_tokenizers.sh" >/dev/null 2>&1 || true
    mkdir "$LOG/claims"
    i=0
    for b in "$@"; do
        i=$((i + 1))
        jobs_of "$b" >"$LOG/jobs$i"
    done
    i=0
    for b in "$@"; do
        i=$((i + 1))
        [ "$i" -eq 1 ] && continue
        mkdir "$LOG/leg$i"
        : >"$LOG/leg$i/skips"
        (WORK="$LOG/leg$i"; worker "$i" "$@" >"$WORK/log" 2>&1; echo "$passed $failed $skipped" >"$WORK/counts") &
    done
    worker 1 "$@"
    wait
    i=0
    for b in "$@"; do
        i=$((i + 1))
        [ "$i" -eq 1 ] && continue
        cat "$LOG/leg$i/log"
        cat "$LOG/leg$i/skips" >>"$LOG/skips"
        if [ -s "$LOG/leg$i/counts" ]; then
            set -- $(cat "$LOG/leg$i/counts")
            passed=$((passed + $1)) failed=$((failed + $2)) skipped=$((skipped + $3))
        else
            echo "not ok - the tests of $b ended without their counts"
            failed=$((failed + 1))
        fi
    done
else
    for b in "$@"; do
        leg "$b"
    done
    fuzz_all
fi

summary
