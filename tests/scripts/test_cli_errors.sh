#!/bin/sh
# The command-line contract (README.md#using-it, docs/reliability.md) on bad input and bad command lines:
# exit codes (0 ok, 1 failure, 2 usage, 3 invalid input file), one error line on
# stderr starting 'kvtrace: error:' that names the problem, outputs refused
# without --force and never left half-written (no output, no .NAME.tmp.* file,
# also after SIGINT/SIGTERM), deterministic synth output, --help/--version.
#
#   sh tests/scripts/test_cli_errors.sh     (tests/run_all.sh sets KVTRACE, ROOT)
# Prints TAP lines; exits non-zero if any check fails.
set -u

ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
KVTRACE=${KVTRACE:-$ROOT/build/kvtrace}
PY=/usr/bin/python3

n=0
failed=0
pass() { # description
    n=$((n + 1))
    echo "ok $n - $1"
}
fail() { # description, explanation lines...
    n=$((n + 1))
    failed=$((failed + 1))
    echo "not ok $n - $1"
    shift
    for line in "$@"; do
        printf '%s\n' "$line" | sed 's/^/#   /'
    done
}

if [ ! -x "$KVTRACE" ]; then
    fail "kvtrace binary at $KVTRACE" "build it with make, or set KVTRACE"
    echo "1..$n"
    exit 1
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/kvtrace_cli.XXXXXX") || exit 1
BGPID=
cleanup() {
    if [ -n "$BGPID" ]; then kill "$BGPID" 2>/dev/null; wait "$BGPID" 2>/dev/null; fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
trap 'exit 141' PIPE

OUT=$TMP/stdout
ERR=$TMP/stderr
RC=0
ndirs=0

newdir() { # a fresh empty directory; its path in $DIR
    ndirs=$((ndirs + 1))
    DIR=$TMP/d$ndirs
    mkdir "$DIR"
}

run() { # command...: runs it, stdout/stderr in $OUT/$ERR, status in $RC
    "$@" >"$OUT" 2>"$ERR"
    RC=$?
}

# Checks the last run: exit status, one 'kvtrace: error:' line naming the problem.
#   expect_error DESC STATUS WORD...   (STATUS "nz": any non-zero; WORDs: grep -i, all must match)
expect_error() {
    ee_desc=$1
    ee_want=$2
    shift 2
    why=
    if [ "$ee_want" = nz ]; then
        [ "$RC" -ne 0 ] || why="$why exit 0, expected non-zero;"
    else
        [ "$RC" -eq "$ee_want" ] || why="$why exit $RC, expected $ee_want;"
    fi
    lines=$(wc -l <"$ERR")
    chars=$(wc -c <"$ERR")
    if [ "$lines" -ne 1 ]; then
        why="$why stderr has $lines lines, expected exactly 1;"
    elif [ "$(tail -c 1 "$ERR" | od -An -c | tr -d ' ')" != '\n' ]; then
        why="$why stderr has text after its one line;"
    fi
    [ "$chars" -gt 0 ] && head -n 1 "$ERR" | grep -q '^kvtrace: error: ' ||
        why="$why stderr does not start with 'kvtrace: error: ';"
    for w in "$@"; do
        grep -qi -e "$w" "$ERR" || why="$why message does not mention '$w';"
    done
    if [ -z "$why" ]; then
        pass "$ee_desc"
    else
        fail "$ee_desc" "$why" "exit status: $RC" "stderr: $(head -c 600 "$ERR")" "stdout: $(head -c 300 "$OUT")"
    fi
}

# The directory holds nothing but the listed names (no output, no .NAME.tmp.*).
expect_only() { # desc dir names...
    eo_desc=$1
    eo_dir=$2
    shift 2
    extra=
    for f in "$eo_dir"/* "$eo_dir"/.[!.]* "$eo_dir"/..?*; do
        [ -e "$f" ] || [ -L "$f" ] || continue
        f=${f##*/}
        keep=no
        for k in "$@"; do [ "$f" = "$k" ] && keep=yes; done
        [ $keep = yes ] || extra="$extra $f"
    done
    if [ -z "$extra" ]; then
        pass "$eo_desc"
    else
        fail "$eo_desc" "left behind:$extra"
    fi
}

sum() { cksum <"$1" 2>/dev/null; }

# ---- a valid trace to break -------------------------------------------------
GOOD=$TMP/good.h5
run "$KVTRACE" synth --like stories260k --tokens 300 --seed 1 -o "$GOOD" --quiet
if [ "$RC" -eq 0 ] && [ -s "$GOOD" ] && [ ! -s "$ERR" ]; then
    pass "synth writes a valid trace (exit 0, silent stderr when not a terminal)"
else
    fail "synth writes a valid trace (exit 0, silent stderr when not a terminal)" \
        "exit $RC" "stderr: $(head -c 600 "$ERR")"
fi
run "$KVTRACE" info "$GOOD"
if [ "$RC" -eq 0 ] && grep -q '/keys' "$OUT" && [ ! -s "$ERR" ]; then
    pass "info on the valid trace: exit 0"
else
    fail "info on the valid trace: exit 0" "exit $RC" "stderr: $(head -c 600 "$ERR")"
fi

# Copy of GOOD changed by a python/h5py snippet (the file is 'f', opened 'r+').
h5edit() { # dest snippet
    cp "$GOOD" "$1" &&
        "$PY" -c "import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], 'r+')
$2
f.close()" "$1"
}

# ---- info: invalid input files ----------------------------------------------
: >"$TMP/empty.h5"
run "$KVTRACE" info "$TMP/empty.h5"
expect_error "info on an empty file: exit 3" 3 'empty.h5' 'empty'

printf 'this is not\nan HDF5 file\n' >"$TMP/text.h5"
run "$KVTRACE" info "$TMP/text.h5"
expect_error "info on a text file: exit 3" 3 'text.h5' 'HDF5'

size=$(wc -c <"$GOOD")
head -c $((size / 2)) "$GOOD" >"$TMP/trunc.h5"
run "$KVTRACE" info "$TMP/trunc.h5"
expect_error "info on a trace cut to half its size: exit 3" 3 'trunc.h5' 'truncat\|corrupt'

head -c 4096 "$GOOD" >"$TMP/trunc4k.h5"
run "$KVTRACE" info "$TMP/trunc4k.h5"
expect_error "info on a trace cut to its first 4 KiB: exit 3" 3 'trunc4k.h5' 'truncat\|corrupt'

if h5edit "$TMP/schema2.h5" "f.attrs['kvtrace_schema'] = np.array([2, 0], dtype=np.int64)"; then
    run "$KVTRACE" info "$TMP/schema2.h5"
    expect_error "info on schema 2.0: exit 3, names the schema" 3 'schema2.h5' 'schema' '2\.0'
else
    fail "info on schema 2.0: exit 3, names the schema" "h5py could not write the file"
fi

if h5edit "$TMP/novalues.h5" "del f['values']"; then
    run "$KVTRACE" info "$TMP/novalues.h5"
    expect_error "info on a trace without /values: exit 3, names /values" 3 'novalues.h5' '/values'
else
    fail "info on a trace without /values: exit 3, names /values" "h5py could not write the file"
fi

if h5edit "$TMP/layers4.h5" "f.attrs['n_layers'] = np.int64(4)"; then
    run "$KVTRACE" info "$TMP/layers4.h5"
    expect_error "info when n_layers disagrees with the shapes: exit 3, names the shape" 3 'layers4.h5' 'shape'
else
    fail "info when n_layers disagrees with the shapes: exit 3, names the shape" "h5py could not write the file"
fi

if h5edit "$TMP/ntok.h5" "f.attrs['n_tokens'] = np.int64(299); f.attrs['prompt_len'] = np.int64(299)"; then
    run "$KVTRACE" info "$TMP/ntok.h5"
    expect_error "info when n_tokens disagrees with the shapes: exit 3, names the shape" 3 'ntok.h5' 'shape'
else
    fail "info when n_tokens disagrees with the shapes: exit 3, names the shape" "h5py could not write the file"
fi

if h5edit "$TMP/notheta.h5" "del f.attrs['rope_theta']"; then
    run "$KVTRACE" info "$TMP/notheta.h5"
    expect_error "info on a trace without rope_theta: exit 3, names it" 3 'notheta.h5' 'rope_theta'
else
    fail "info on a trace without rope_theta: exit 3, names it" "h5py could not write the file"
fi

run "$KVTRACE" info "$TMP/no-such-file.h5"
expect_error "info on a missing file: exit 1" 1 'no-such-file.h5'

newdir
run "$KVTRACE" info "$DIR"
expect_error "info on a directory: non-zero, one line" nz "$DIR"

# ---- usage errors -------------------------------------------------------------
run "$KVTRACE" frobnicate
expect_error "unknown verb: exit 2" 2 'frobnicate'

run "$KVTRACE" info
expect_error "info without FILE: exit 2" 2 'FILE\|missing'

run "$KVTRACE" info "$GOOD" "$GOOD"
expect_error "info with two files: exit 2" 2 'one FILE\|exactly'

run "$KVTRACE" info --bogus
expect_error "info --bogus: exit 2" 2 'bogus'

# synth usage errors, each in its own empty directory with -o x.h5
synth_usage() { # desc word args...
    su_desc=$1
    su_word=$2
    shift 2
    newdir
    (cd "$DIR" && "$KVTRACE" synth "$@" >"$OUT" 2>"$ERR")
    RC=$?
    expect_error "synth $su_desc: exit 2" 2 "$su_word"
    expect_only "synth $su_desc: nothing written" "$DIR"
}
synth_usage "without --tokens" 'tokens' --like stories260k -o x.h5
synth_usage "with an unknown option --bogus" 'bogus' --like stories260k --tokens 10 --bogus -o x.h5
synth_usage "with --tokens missing its value" 'tokens' --like stories260k -o x.h5 --tokens
synth_usage "--like nosuchmodel" 'nosuchmodel' --like nosuchmodel --tokens 10 -o x.h5
synth_usage "--tokens 0" 'tokens' --like stories260k --tokens 0 -o x.h5
synth_usage "--tokens abc" 'tokens' --like stories260k --tokens abc -o x.h5
synth_usage "--dtype f64" 'dtype' --like stories260k --tokens 10 --dtype f64 -o x.h5
synth_usage "--deflate 10" 'deflate' --like stories260k --tokens 10 --deflate 10 -o x.h5
synth_usage "without -o" 'o PATH\|output' --like stories260k --tokens 10
synth_usage "--heads 6 --kv-heads 4" 'multiple' --layers 1 --heads 6 --kv-heads 4 --head-dim 8 --tokens 10 -o x.h5
synth_usage "--head-dim 7" 'even' --layers 1 --heads 4 --kv-heads 2 --head-dim 7 --tokens 10 -o x.h5
synth_usage "--prompt-len beyond --tokens" 'prompt-len' --like stories260k --tokens 10 --prompt-len 11 -o x.h5
synth_usage "with a stray argument" 'stray' --like stories260k --tokens 10 -o x.h5 stray

# ---- output refusal -------------------------------------------------------------
newdir
(cd "$DIR" && "$KVTRACE" synth --like stories260k --tokens 64 --seed 1 -o x.h5 --quiet >"$OUT" 2>"$ERR")
before=$(sum "$DIR/x.h5")
(cd "$DIR" && "$KVTRACE" synth --like stories260k --tokens 64 --seed 2 -o x.h5 --quiet >"$OUT" 2>"$ERR")
RC=$?
expect_error "synth onto an existing file without --force: exit 2" 2 'x.h5' 'exists\|force'
if [ -n "$before" ] && [ "$(sum "$DIR/x.h5")" = "$before" ]; then
    pass "synth without --force leaves the existing file unchanged"
else
    fail "synth without --force leaves the existing file unchanged" "checksum before: $before" \
        "after: $(sum "$DIR/x.h5")"
fi
expect_only "synth without --force leaves no temporary file" "$DIR" x.h5

run "$KVTRACE" synth --like stories260k --tokens 64 --seed 2 -o "$DIR/x.h5" --force --quiet
after=$(sum "$DIR/x.h5")
if [ "$RC" -eq 0 ] && [ ! -s "$ERR" ] && [ -n "$after" ] && [ "$after" != "$before" ]; then
    pass "synth --force replaces the existing file (exit 0)"
else
    fail "synth --force replaces the existing file (exit 0)" "exit $RC" "stderr: $(head -c 600 "$ERR")" \
        "checksum before: $before, after: $after"
fi
expect_only "synth --force leaves no temporary file" "$DIR" x.h5
run "$KVTRACE" info "$DIR/x.h5"
if [ "$RC" -eq 0 ] && grep -q 'seed 2' "$OUT"; then
    pass "the replaced file is the new (seed 2) trace"
else
    fail "the replaced file is the new (seed 2) trace" "exit $RC" "$(head -c 600 "$OUT")" "$(head -c 600 "$ERR")"
fi

newdir
mkdir "$DIR/sub.h5"
run "$KVTRACE" synth --like stories260k --tokens 10 -o "$DIR/sub.h5" --force --quiet
expect_error "synth onto a directory, even with --force: non-zero" nz 'director'
expect_only "synth onto a directory leaves nothing beside it" "$DIR" sub.h5
expect_only "synth onto a directory leaves nothing inside it" "$DIR/sub.h5"

newdir
run "$KVTRACE" synth --like stories260k --tokens 10 -o "$DIR/nosuchdir/x.h5" --quiet
expect_error "synth into a missing directory: non-zero, one line" nz 'nosuchdir'
expect_only "synth into a missing directory creates nothing" "$DIR"

# ---- determinism ------------------------------------------------------------------
newdir
run "$KVTRACE" synth --like stories260k --tokens 200 --seed 7 -o "$DIR/a.h5" --quiet
sleep 1 # object timestamps, if any, have a resolution of one second
run "$KVTRACE" synth --like stories260k --tokens 200 --seed 7 -o "$DIR/b.h5" --quiet
run "$KVTRACE" synth --like stories260k --tokens 200 --seed 8 -o "$DIR/c.h5" --quiet
# the data (everything but /provenance, which names each -o: docs/provenance.md)
if [ -s "$DIR/a.h5" ] && "$PY" "$ROOT/tests/lib/datacmp.py" "$DIR/a.h5" "$DIR/b.h5" >"$DIR/diff" 2>&1; then
    pass "synth with the same --seed, a second later, gives byte-identical data"
else
    fail "synth with the same --seed, a second later, gives byte-identical data" "$(cat "$DIR/diff")"
fi
if [ -s "$DIR/c.h5" ] && ! "$PY" "$ROOT/tests/lib/datacmp.py" "$DIR/a.h5" "$DIR/c.h5" >/dev/null 2>&1; then
    pass "synth with another --seed gives different data"
else
    fail "synth with another --seed gives different data" "c.h5 missing or its data equal to a.h5's"
fi
run "$KVTRACE" synth --like stories260k --tokens 200 --seed 7 --dtype f16 --deflate 6 -o "$DIR/d.h5" --quiet
run "$KVTRACE" synth --like stories260k --tokens 200 --seed 7 --dtype f16 --deflate 6 -o "$DIR/e.h5" --quiet
if [ -s "$DIR/d.h5" ] && "$PY" "$ROOT/tests/lib/datacmp.py" "$DIR/d.h5" "$DIR/e.h5" >"$DIR/diff" 2>&1; then
    pass "synth --dtype f16 --deflate 6 is deterministic too"
else
    fail "synth --dtype f16 --deflate 6 is deterministic too" "$(cat "$DIR/diff")"
fi
mkdir "$DIR/x" "$DIR/y"
(cd "$DIR/x" && run "$KVTRACE" synth --like stories260k --tokens 50 --seed 7 -o t.h5 --quiet)
(cd "$DIR/y" && run "$KVTRACE" synth --like stories260k --tokens 50 --seed 7 -o t.h5 --quiet)
if [ -s "$DIR/x/t.h5" ] && cmp -s "$DIR/x/t.h5" "$DIR/y/t.h5"; then
    pass "the same synth command in two folders gives byte-identical files, provenance included (no time)"
else
    fail "the same synth command in two folders gives byte-identical files, provenance included (no time)" \
        "$(cmp "$DIR/x/t.h5" "$DIR/y/t.h5" 2>&1)"
fi

# ---- --version, --help --------------------------------------------------------
run "$KVTRACE" --version
want=$(sed -n 's/^#define KVTRACE_VERSION "\(.*\)".*/\1/p' "$ROOT/core/version.h" 2>/dev/null)
got=$(cat "$OUT")
if [ "$RC" -eq 0 ] && [ "$(wc -l <"$OUT")" -eq 1 ] && echo "$got" | grep -q '^kvtrace [0-9][0-9.]*' &&
    { [ -z "$want" ] || [ "$got" = "kvtrace $want" ]; }; then
    pass "kvtrace --version prints 'kvtrace VERSION' (exit 0)"
else
    fail "kvtrace --version prints 'kvtrace VERSION' (exit 0)" "exit $RC" "stdout: $got" \
        "expected: kvtrace $want"
fi

run "$KVTRACE" --help
if [ "$RC" -eq 0 ] && grep -q 'usage' "$OUT" && [ ! -s "$ERR" ]; then
    pass "kvtrace --help: exit 0, usage on stdout"
else
    fail "kvtrace --help: exit 0, usage on stdout" "exit $RC" "stderr: $(head -c 300 "$ERR")"
fi

run "$KVTRACE"
if [ "$RC" -eq 2 ] && grep -q 'usage' "$ERR"; then
    pass "kvtrace without a verb: exit 2, usage on stderr"
else
    fail "kvtrace without a verb: exit 2, usage on stderr" "exit $RC"
fi

for verb in capture info synth sim analyze plot fidelity policies demo; do
    run "$KVTRACE" "$verb" --help
    if [ "$RC" -eq 0 ] && [ -s "$OUT" ] && grep -q "$verb" "$OUT" && [ ! -s "$ERR" ]; then
        pass "kvtrace $verb --help: exit 0, text on stdout"
    else
        fail "kvtrace $verb --help: exit 0, text on stdout" "exit $RC" "stdout: $(head -c 300 "$OUT")" \
            "stderr: $(head -c 300 "$ERR")"
    fi
    if "$KVTRACE" --help | grep -q "^  $verb "; then
        pass "kvtrace --help lists $verb"
    else
        fail "kvtrace --help lists $verb" "$("$KVTRACE" --help 2>&1 | head -c 600)"
    fi
done

for verb in capture sim analyze plot fidelity policies demo; do
    # a verb that has become implemented no longer answers "not implemented"
    run "$KVTRACE" "$verb"
    if [ "$RC" -eq 1 ] && grep -q 'not implemented' "$ERR"; then
        expect_error "kvtrace $verb (not implemented yet): exit 1, one line" 1 'not implemented' "$verb"
    elif "$KVTRACE" --help | grep "^  $verb " | grep -q 'not implemented'; then
        expect_error "kvtrace $verb (not implemented yet): exit 1, one line" 1 'not implemented' "$verb"
    else
        pass "kvtrace $verb is implemented: it does not answer 'not implemented'"
    fi
done

# ---- interruption ---------------------------------------------------------------
interrupt() { # signal expected-status
    sig=$1
    want=$2
    newdir
    (cd "$DIR" && exec "$KVTRACE" synth --like llama-3.2-1b --tokens 4096 -o big.h5 --quiet) \
        >"$OUT" 2>"$ERR" &
    BGPID=$!
    # wait (up to 5 s) for the temporary file to appear, then one second more
    i=0
    while [ $i -lt 50 ] && [ -z "$(ls -A "$DIR")" ]; do
        sleep 0.1
        i=$((i + 1))
    done
    tmpseen=$(ls -A "$DIR")
    sleep 1
    if kill -s "$sig" "$BGPID" 2>/dev/null; then
        wait "$BGPID" 2>/dev/null
        RC=$?
        BGPID=
        case "$tmpseen" in
        .big.h5.tmp.*) pass "synth writes to a temporary .big.h5.tmp.* name while it works" ;;
        *) fail "synth writes to a temporary .big.h5.tmp.* name while it works" "saw: '$tmpseen'" ;;
        esac
        if [ "$RC" -eq "$want" ]; then
            pass "synth ends on SIG$sig with status $want (killed by the signal)"
        else
            fail "synth ends on SIG$sig with status $want (killed by the signal)" "status $RC" \
                "stderr: $(head -c 300 "$ERR")"
        fi
        expect_only "after SIG$sig: neither big.h5 nor .big.h5.tmp.* remains" "$DIR"
    else
        wait "$BGPID"
        BGPID=
        fail "synth still running after 1 s, to interrupt with SIG$sig" "it ended first: $(head -c 300 "$ERR")"
    fi
}
interrupt INT 130
interrupt TERM 143

# an output directory (sim's) is removed with everything in it when interrupted
newdir
"$KVTRACE" synth --layers 4 --heads 32 --kv-heads 8 --head-dim 64 --tokens 1024 -o "$DIR/t.h5" --quiet >/dev/null 2>&1
(cd "$DIR" && exec "$KVTRACE" sim t.h5 --policies keydiff,tova,snapkv,oracle --budgets 64,128 --chunk 64 \
    --threads 1 -o res --quiet) >"$OUT" 2>"$ERR" &
BGPID=$!
i=0
while [ $i -lt 100 ] && ! ls -A "$DIR" | grep -q '^\.res\.tmp\.'; do
    sleep 0.1
    i=$((i + 1))
done
tmpseen=$(ls -A "$DIR" | grep '^\.res\.tmp\.')
sleep 0.3
if [ -n "$tmpseen" ] && kill -s INT "$BGPID" 2>/dev/null; then
    wait "$BGPID" 2>/dev/null
    RC=$?
    BGPID=
    if [ "$RC" -eq 130 ]; then pass "sim ends on SIGINT with status 130"; else fail "sim ends on SIGINT with status 130" "status $RC"; fi
    expect_only "after SIGINT: neither res/ nor .res.tmp.*/ remains, only the trace" "$DIR" t.h5
else
    wait "$BGPID" 2>/dev/null
    BGPID=
    fail "sim working in a temporary .res.tmp.* directory, to interrupt" "saw: '$tmpseen'; $(head -c 300 "$ERR")"
fi

echo "1..$n"
[ "$failed" -eq 0 ]
