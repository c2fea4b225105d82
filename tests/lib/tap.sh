# Sourced by the sh test scripts in tests/scripts: TAP lines as tests/lib/tap.py
# prints them, counted by tests/run_all.sh.
#   pass WHAT;  fail WHAT [DETAIL...] (details on "#" lines);  skip WHAT REASON (a
#   check that cannot run here: "ok N - WHAT # SKIP REASON", counted as skipped)
# The script ends with: echo "1..$n"; [ "$failed" -eq 0 ]
n=0
failed=0
pass() { n=$((n + 1)); echo "ok $n - $1"; }
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }
fail() {
    n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; shift
    for line in "$@"; do printf '%s\n' "$line" | sed 's/^/#   /'; done
}
