# TAP counts of one test program's output, for tests/run_all.sh:
#   awk -v name=NAME -v skips=FILE -f tests/lib/tap_count.awk OUTPUT
# prints "PASSED FAILED SKIPPED" and appends "REASON<TAB>NAME" to FILE per skip.
# "ok N ..." passes and "not ok N ..." fails, unless the line carries a TAP
# "# SKIP" directive (any case): then it is skipped, neither passed nor failed,
# as is a "1..0 # SKIP" plan. The reason is the text after the directive, or,
# for cmocka (whose skip() prints "not ok N # SKIP test_name"), the text of the
# "# skip: REASON" line the test printed before it (tests/unit/testutil.h tu_skip).
function skip(line, r) {
    r = line
    sub(/^.*#[ \t]*[Ss][Kk][Ii][Pp][A-Za-z]*[ \t:]*/, "", r)
    if (reason != "") r = reason
    if (r == "") r = "(no reason given)"
    printf "%s\t%s\n", r, name >>skips
    s++
    reason = ""
}
/^# skip: / { reason = substr($0, 9); next }
/^(ok|not ok)[ \t]/ && /#[ \t]*[Ss][Kk][Ii][Pp]/ { skip($0); next }
/^1\.\.0[ \t]*#[ \t]*[Ss][Kk][Ii][Pp]/ { skip($0); next }
/^ok / { p++; reason = ""; next }
/^not ok / { f++; reason = ""; next }
END { printf "%d %d %d\n", p, f, s }
