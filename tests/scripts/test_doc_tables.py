"""The doc tables code owns (scripts/doc_tables.py): docs/trace.md's dataset
table is `kvtrace info --schema` word for word, docs/outputs.md describes every
column of every CSV sim and analyze write (`kvtrace info --columns`) and no
other; the checker sees a changed line, a missing and an extra column; and
the `description` attribute h5py reads from a written trace is the table's. TAP.
    KVTRACE=build/kvtrace /usr/bin/python3 tests/scripts/test_doc_tables.py"""
import os
import shutil
import subprocess
import sys
import tempfile

import h5py

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
from tap import NO_MODEL, check, finish, model_file, skip  # noqa: E402
import doc_tables  # noqa: E402

KVTRACE = os.environ["KVTRACE"]


def schema_rows():
    """{path: description} parsed from `kvtrace info --schema` (markdown escapes undone)."""
    out = subprocess.run([KVTRACE, "info", "--schema"], capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0].strip("`")] = cells[3].replace("\\", "")
    return rows


def with_docs(tmp, edit_trace=None, edit_outputs=None):
    """The checker's problems on copies of the docs, edited."""
    paths = {}
    for name, edit in (("trace.md", edit_trace), ("outputs.md", edit_outputs)):
        p = os.path.join(tmp, name)
        shutil.copy(os.path.join(doc_tables.ROOT, "docs", name), p)
        if edit:
            with open(p, encoding="utf-8") as f:
                text = f.read()
            with open(p, "w", encoding="utf-8") as f:
                f.write(edit(text))
        paths[name] = p
    doc_tables.TRACE_MD, doc_tables.OUTPUTS_MD = paths["trace.md"], paths["outputs.md"]
    return doc_tables.check_trace(KVTRACE, False) + doc_tables.check_outputs(KVTRACE)


def main():
    r = subprocess.run([sys.executable, os.path.join(doc_tables.ROOT, "scripts", "doc_tables.py"), KVTRACE],
                       capture_output=True, text=True)
    check(r.returncode == 0 and not r.stdout, "docs/trace.md and docs/outputs.md agree with the code's tables",
          r.stdout + r.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        p = with_docs(tmp, edit_trace=lambda t: t.replace("keys after RoPE", "keys before RoPE", 1))
        check(len(p) == 1 and "line" in p[0], "a changed description in docs/trace.md is found", p)
        p = with_docs(tmp, edit_outputs=lambda t: t.replace("| `calls` |", "| `callz` |", 1))
        check(any("timing.csv" in x and "callz" in x for x in p) and any("does not describe: calls" in x for x in p),
              "an undescribed and an unknown column of docs/outputs.md are found", p)
        p = with_docs(tmp, edit_trace=lambda t: t.replace(doc_tables.END, "", 1))
        check(len(p) == 1 and "markers" in p[0], "a lost marker is found", p)

        rows = schema_rows()
        trace = os.path.join(tmp, "t.h5")
        r = subprocess.run([KVTRACE, "synth", "--quiet", "--like", "stories260k", "--tokens", "40", "--seed", "1",
                            "-o", trace], capture_output=True, text=True)
        check(r.returncode == 0, "a synth trace", r.stderr)
        bad = []
        with h5py.File(trace, "r") as f:
            def visit(name, obj):
                if "description" in obj.attrs and rows.get("/" + name) != obj.attrs["description"]:
                    bad.append((name, obj.attrs["description"], rows.get("/" + name)))
            f.visititems(visit)
            n = sum(1 for k in rows if k.lstrip("/") in f)
        check(not bad and n >= 7, "each of the %d datasets' description attribute is the table's" % n, bad)
        model = model_file()
        if model is None:
            skip("kvtrace info lists /prompt_text and /wo (a stories260K capture)", NO_MODEL)
        else:
            cap = os.path.join(tmp, "c.h5")
            r = subprocess.run([KVTRACE, "capture", "--model", model, "--prompt", "Once upon a time", "--generate", "4",
                                "--record", "keys,values,queries,wo", "--quiet", "-o", cap], capture_output=True,
                               text=True)
            info = subprocess.run([KVTRACE, "info", cap], capture_output=True, text=True).stdout
            with h5py.File(cap, "r") as f:
                listed = [k for k in ("prompt_text", "wo") if k in f]
                wo = f["wo"].shape if "wo" in f else None
            check(r.returncode == 0 and listed == ["prompt_text", "wo"] and "  /prompt_text " in info
                  and "  /wo                  [%d, %d, %d]" % wo in info,
                  "kvtrace info lists every dataset h5py finds, /prompt_text and /wo among them", info)
    finish()


if __name__ == "__main__":
    main()
