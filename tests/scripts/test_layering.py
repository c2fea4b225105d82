"""The layout's rules, checked on the built objects and the sources (TAP).

- No loops between files: file A "uses" file B when A's object refers to a
  symbol B's object defines (nm); no set of two or more files reaches itself.
- One way down between folders: a folder may use (by symbol or by #include)
  only the folders listed below it in LAYERS.
- The README's layer table (folder, what it holds, what it uses) lists for each folder exactly
  the layers LAYERS allows it.
- No process-wide mutable state in the library: no object of ours holds a
  writable global or static variable (.data/.bss), apart from ALLOWED_STATE.
(Folders follow concepts: there is no cap on a folder's lines.)

    /usr/bin/python3 tests/scripts/test_layering.py   (BUILD selects the build directory)
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from tap import check, finish  # noqa: E402

ROOT = os.environ.get("ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BUILD", "build")
OBJ = os.path.join(ROOT, BUILD, "obj")

# Each folder and the folders it may use. model/'s subfolders are one layer
# with model/ (the loaders fill the model description, the walk reads it).
LAYERS = {
    "core": [],
    "trace": ["core"],
    "provenance": ["core"],
    "policies": ["core"],
    "allocators": ["core", "policies"],
    "plan": ["core", "policies", "allocators"],  # the run plan from the policies' and allocators' declarations
    "expr": ["core", "policies"],
    "python": ["core", "policies"],
    "userpol": ["core", "policies", "allocators", "expr", "python"],  # --alias, --plugin, --define(s): one table per command  # --plugin FILE.py: the embedded interpreter, beside policies/plugin.c
    "model": ["core", "trace"],
    "synth": ["core", "trace", "provenance"],
    "results": ["core", "provenance"],
    "study": ["core"],  # a study's traces (index.jsonl) and its statistics over traces
    "analysis": ["core", "trace", "provenance", "results", "study"],
    "sim": ["core", "trace", "provenance", "policies", "allocators", "plan", "expr", "python", "userpol", "analysis", "results", "study"],
    "capture": ["core", "trace", "provenance", "model", "policies", "allocators", "plan", "expr", "python", "userpol", "study"],
    "plots": ["core", "provenance", "results"],  # results/results_schema.h: the columns analyze writes
    "fidelity": ["core", "trace", "provenance", "model", "policies", "allocators", "plan", "expr", "python", "userpol", "capture", "sim", "analysis", "results", "plots",
                 "study"],
    "search": ["core", "trace", "provenance", "policies", "allocators", "plan", "expr", "python", "userpol", "analysis", "sim", "results", "study", "plots"],
    "cli": ["core", "trace", "provenance", "model", "policies", "allocators", "plan", "expr", "python", "userpol", "synth", "results", "analysis", "sim", "capture", "plots",
            "fidelity", "study", "search"],
}

# Writable static state that is process-wide by nature: the registry of
# temporary outputs that the signal handler removes.
ALLOWED_STATE = {("core/outfile.o", "pending"), ("core/outfile.o", "pending_used")}


def folder_of(rel):
    """The layer of a path relative to ROOT or OBJ: its first component."""
    return rel.split("/", 1)[0]


def objects():
    out = []
    for d, _, files in os.walk(OBJ):
        for f in files:
            if f.endswith(".o"):
                rel = os.path.relpath(os.path.join(d, f), OBJ)
                src = os.path.join(ROOT, rel[:-2] + ".c")
                if os.path.exists(src):  # objects of files since moved are stale
                    out.append(rel)
    return sorted(out)


def symbols(objs):
    """defined[sym] = object; used[object] = set of symbols it refers to."""
    defined, used = {}, {}
    for o in objs:
        text = subprocess.run(["nm", os.path.join(OBJ, o)], capture_output=True, text=True, check=True).stdout
        used[o] = set()
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U":
                used[o].add(parts[1])
            elif len(parts) == 3 and parts[1] in "TDRBiW":
                defined[parts[2]] = o
    return defined, used


def file_graph(objs, defined, used):
    g = {o: set() for o in objs}
    for o in objs:
        for s in used[o]:
            d = defined.get(s)
            if d and d != o:
                g[o].add(d)
    return g


def loops(g):
    """Strongly connected components of two or more nodes (Tarjan)."""
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(g[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                    advanced = True
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return comps


def mutable_state(objs):
    found = []
    for o in objs:
        text = subprocess.run(["objdump", "-t", os.path.join(OBJ, o)], capture_output=True, text=True,
                              check=True).stdout
        for line in text.splitlines():
            m = re.search(r"\sO\s+(\.data|\.bss)(\.\S+)?\s+\S+\s+(\S+)$", line)
            if not m or (m.group(2) or "").startswith(".rel.ro"):
                continue
            name = m.group(3).split(".")[0]
            if name.startswith("__odr_asan"):  # AddressSanitizer's one-definition-rule markers
                continue
            if (o, name) not in ALLOWED_STATE:
                found.append("%s: %s (%s%s)" % (o, m.group(3), m.group(1), m.group(2) or ""))
    return found


def sources():
    out = []
    for folder in LAYERS:
        for d, _, files in os.walk(os.path.join(ROOT, folder)):
            for f in files:
                if f.endswith((".c", ".h", ".cu")):
                    out.append(os.path.relpath(os.path.join(d, f), ROOT))
    return sorted(out)


INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.M)

# The public headers (include/kvtrace/, found by -Iinclude and installed for plug-ins): below
# every folder, so any may include them; they include only each other.
PUBLIC = "kvtrace"
PUBLIC_DIR = os.path.join("include", "kvtrace")


def main():
    objs = [o for o in objects() if folder_of(o) in LAYERS]
    check(len(objs) > 50, "the build's objects are there (%d in %s)" % (len(objs), OBJ))
    defined, used = symbols(objs)
    g = file_graph(objs, defined, used)

    cyc = loops(g)
    check(not cyc, "no loops between files (%d files, %d uses)" % (len(g), sum(len(v) for v in g.values())),
          "\n".join(" <-> ".join(c) for c in cyc))

    bad = sorted({"%s uses %s (%s)" % (folder_of(a), folder_of(b), a + " -> " + b)
                  for a in g for b in g[a]
                  if folder_of(a) != folder_of(b) and folder_of(b) not in LAYERS[folder_of(a)]})
    check(not bad, "folders call only the layers below them", "\n".join(bad))

    bad_inc = []
    for src in sources():
        text = open(os.path.join(ROOT, src), encoding="utf-8").read()
        top = folder_of(src)
        for inc in INCLUDE.findall(text):
            if inc != top and inc != PUBLIC and inc not in LAYERS[top]:
                bad_inc.append("%s includes %s/" % (src, inc))
    check(not bad_inc, "folders include only the layers below them", "\n".join(bad_inc))

    bad_pub = []
    for f in sorted(os.listdir(os.path.join(ROOT, PUBLIC_DIR))):
        text = open(os.path.join(ROOT, PUBLIC_DIR, f), encoding="utf-8").read()
        bad_pub += ["%s/%s includes %s/" % (PUBLIC_DIR, f, inc) for inc in INCLUDE.findall(text) if inc != PUBLIC]
    check(not bad_pub, "the public headers (%s) include only each other" % PUBLIC_DIR, "\n".join(bad_pub))

    # the README's layer table says the same: each folder's row lists exactly the layers it may use
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    rows = {m.group(1): set(re.findall(r"`([a-z]+)/`", m.group(2))) for m in
            re.finditer(r"^\| `([a-z]+)/` \| .* \| ([^|]*) \|$", readme, re.M) if m.group(1) in LAYERS}
    wrong = ["%s: README says %s, the layers %s" % (f, sorted(rows.get(f, {"(no row)"})), sorted(LAYERS[f]))
             for f in LAYERS if rows.get(f) != set(LAYERS[f])]
    check(not wrong, "the README's layer table lists what each folder may use", "\n".join(wrong))

    state = mutable_state(objs)
    check(not state, "no process-wide mutable state in the library", "\n".join(state))

    return finish()


if __name__ == "__main__":
    sys.exit(main())
