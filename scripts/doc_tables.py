#!/usr/bin/python3
"""The doc tables that code owns, kept equal to it.

docs/trace.md's dataset table is printed by `kvtrace info --schema` (from
trace/trace_schema.c) between two marker lines; docs/outputs.md describes each
CSV's columns in a section per file under the part of the verb that writes it,
and the set of column names its table names must be the schema's (`kvtrace
info --columns`, from results/results_schema.c and fidelity/fidelity_schema.c),
every column described, none that is not written.

    scripts/doc_tables.py KVTRACE --write   rewrite docs/trace.md's table (make docs)
    scripts/doc_tables.py KVTRACE           check both; one line per difference, exit 1 on any
"""
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
TRACE_MD = os.path.join(ROOT, "docs", "trace.md")
OUTPUTS_MD = os.path.join(ROOT, "docs", "outputs.md")
BEGIN = "<!-- kvtrace info --schema: begin"
END = "<!-- kvtrace info --schema: end -->"
# files whose section is not a table of columns: meta.csv lists keys (its columns are key,value)
NOT_COLUMN_TABLES = {"meta.csv"}


def kvtrace(exe, *args):
    r = subprocess.run([exe, "info"] + list(args), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("doc_tables: %s info %s failed: %s" % (exe, " ".join(args), r.stderr.strip()))
    return r.stdout


def trace_block(text):
    """(start, end) of the generated lines between the markers."""
    b = text.find(BEGIN)
    e = text.find(END)
    if b < 0 or e < b:
        return None
    return text.index("\n", b) + 1, e


def check_trace(exe, write):
    with open(TRACE_MD, encoding="utf-8") as f:
        text = f.read()
    span = trace_block(text)
    if span is None:
        return ["docs/trace.md: the markers of the generated dataset table are missing"]
    want = kvtrace(exe, "--schema")
    if write:
        with open(TRACE_MD, "w", encoding="utf-8") as f:
            f.write(text[:span[0]] + want + text[span[1]:])
        return []
    got = text[span[0]:span[1]]
    if got == want:
        return []
    g, w = got.splitlines(), want.splitlines()
    for i in range(max(len(g), len(w))):
        if i >= len(g) or i >= len(w) or g[i] != w[i]:
            return ["docs/trace.md: the dataset table differs from `kvtrace info --schema` at its line %d "
                    "(run make docs):\n  doc:  %s\n  code: %s" % (i + 1, g[i] if i < len(g) else "(none)",
                                                               w[i] if i < len(w) else "(none)")]
    return []


# the heading of each verb's part of docs/outputs.md
VERB_SECTIONS = {"sim": "## `kvtrace sim -o DIR`", "analyze": "## `kvtrace analyze -o DIR`",
                 "fidelity": "## `kvtrace fidelity -o DIR`", "fidelity --prompts": "## `kvtrace fidelity --prompts FILE -o DIR`"}


def verb_part(text, verb):
    """The text of docs/outputs.md's part for `verb` (from its heading to the next one of its level)."""
    head = VERB_SECTIONS.get(verb)
    m = re.search(r"^%s( .*)?$" % re.escape(head), text, re.M) if head else None
    if not m:
        return None
    rest = text[m.end():]
    nxt = re.search(r"^## ", rest, re.M)
    return rest[:nxt.start()] if nxt else rest


def doc_columns(text, file):
    """The column names the section for `file` in `text` names in its table's first column."""
    m = re.search(r"^###+ `%s`.*$" % re.escape(file), text, re.M)
    if not m:
        return None
    rest = text[m.end():]
    nxt = re.search(r"^##", rest, re.M)
    section = rest[:nxt.start()] if nxt else rest
    names = set()
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| column") or line.startswith("| ---"):
            continue
        first = line.split(" | ")[0]
        names.update(re.findall(r"`([A-Za-z0-9_]+)`", first))
    return names


def check_outputs(exe):
    with open(OUTPUTS_MD, encoding="utf-8") as f:
        text = f.read()
    problems = []
    for line in kvtrace(exe, "--columns").splitlines():
        m = re.match(r"^\[([^]]+)\] (\S+): (.*)$", line)
        if not m:
            problems.append("kvtrace info --columns: cannot read the line %r" % line)
            continue
        verb, file, cols = m.groups()
        if file in NOT_COLUMN_TABLES:
            continue
        want = set(cols.split(","))
        part = verb_part(text, verb)
        got = doc_columns(part, file) if part is not None else None
        file = "%s (kvtrace %s)" % (file, verb)
        if got is None:
            problems.append("docs/outputs.md: no section for %s" % file)
            continue
        if got - want:
            problems.append("docs/outputs.md: %s's table names columns the file does not have: %s"
                            % (file, ", ".join(sorted(got - want))))
        if want - got:
            problems.append("docs/outputs.md: %s's table does not describe: %s" % (file, ", ".join(sorted(want - got))))
    return problems


def main():
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--write"):
        sys.exit(__doc__)
    exe, write = sys.argv[1], len(sys.argv) == 3
    problems = check_trace(exe, write)
    if write:
        return 0
    problems += check_outputs(exe)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
