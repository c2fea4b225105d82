"""Provenance (docs/provenance.md), checked with h5py, json and hashlib, never kvtrace's own reader:

- capture, synth: the trace's /provenance group (flat attributes and the JSON copy agree) holds the
  command as typed, the version of core/version.h, each input's path, size and sha256 (the model file,
  a llama2.c checkpoint and its tokenizer, a --prompt-file or --tokens file), the seed, the
  temperature, the kind of prompt; no time unless SOURCE_DATE_EPOCH (exact) or --timestamp asks;
- equal commands in two folders give byte-identical traces, provenance included;
- every dataset of a trace carries a non-empty `description` attribute (full attention, logits,
  eviction snapshots, synth's too), and h5py traces without /provenance still work;
- sim: results.h5's root attributes command, trace_path, trace_sha256 and /provenance, and the
  results directory's provenance.json; analyze, plot, fidelity: provenance.json with their inputs'
  sha256 and the commands that made them (steps), capture first;
- kvtrace info shows the provenance of a trace and of a results.h5.
The model tests are skipped without the test model; synth's run anyway."""
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import NO_MODEL, check, finish, model_file, skip  # noqa: E402

KVTRACE = os.environ.get("KVTRACE") or os.path.join(os.environ.get("ROOT", "."), "build", "kvtrace")
ROOT = os.environ.get("ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VERSION = re.search(r'KVTRACE_VERSION "([^"]+)"', open(os.path.join(ROOT, "core", "version.h")).read()).group(1)


def run(args, cwd=None, env=None):
    e = dict(os.environ)
    e.pop("SOURCE_DATE_EPOCH", None)
    e.update(env or {})
    return subprocess.run([KVTRACE] + [str(a) for a in args], capture_output=True, text=True, cwd=cwd, env=e)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def command(args):
    """The command line as kvtrace records it: words of [A-Za-z0-9_+=:,./@%-] as they are, others in single
    quotes with each ' written '\\'' (what a POSIX shell reads back as the same words)."""
    def quote(a):
        a = str(a)
        if a and re.fullmatch(r"[A-Za-z0-9_+=:,./@%-]+", a):
            return a
        return "'" + a.replace("'", "'\\''") + "'"
    return "kvtrace " + " ".join(quote(a) for a in args)


def h5_record(path):
    """(flat attributes, the JSON record) of path's /provenance."""
    with h5py.File(path, "r") as f:
        if "provenance" not in f:
            return None, None
        a = {k: f["provenance"].attrs[k] for k in f["provenance"].attrs}
    flat = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in a.items()}
    return flat, json.loads(flat["json"])


def inputs_ok(rec, want, cwd):
    """want: [(role, path as recorded)]; the files hashed here with hashlib."""
    got = [(i["role"], i["path"], i["size"], i["sha256"]) for i in rec["inputs"]]
    exp = []
    for role, path in want:
        full = os.path.join(cwd, path)
        exp.append((role, path, os.path.getsize(full), sha256(full)))
    return got == exp, "got %s\nwant %s" % (got, exp)


def check_inputs(rec, want, cwd, what):
    ok, detail = inputs_ok(rec, want, cwd)
    check(ok, what, detail)


def check_flat(what, flat, rec):
    same = (flat["command"] == rec["command"] and flat["kvtrace_version"] == rec["kvtrace_version"] and
            list(flat["argv"]) == rec["argv"] and
            list(flat.get("input_paths", [])) == [i["path"] for i in rec["inputs"]] and
            list(flat.get("input_sha256", [])) == [i["sha256"] for i in rec["inputs"]] and
            list(flat.get("input_sizes", [])) == [i["size"] for i in rec["inputs"]] and
            list(flat.get("step_commands", [])) == [s["command"] for s in rec["steps"]])
    check(same, "%s: /provenance's flat attributes and its JSON copy agree" % what, lambda: "%s\n%s" % (flat, rec))


def descriptions(what, path):
    bad = []
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                d = obj.attrs.get("description")
                if not isinstance(d, str) or len(d) < 10:
                    bad.append(name)
        f.visititems(visit)
    check(not bad, "%s: every dataset has a description attribute" % what, bad)


def synth_checks(tmp):
    args = ["synth", "--like", "stories260k", "--tokens", "40", "--seed", "9", "-o", "s.h5", "--quiet"]
    r = run(args, cwd=tmp)
    check(r.returncode == 0, "synth", r.stderr)
    flat, rec = h5_record(os.path.join(tmp, "s.h5"))
    check(rec and rec["command"] == command(args) and rec["verb"] == "synth" and rec["seed"] == 9 and
          rec["inputs"] == [] and rec["steps"] == [] and rec["kvtrace_version"] == VERSION and "time" not in rec,
          "synth: /provenance has the command, version, seed, no inputs and no time", rec)
    check(flat and flat["seed"] == 9 and "temperature" not in flat, "synth: seed as an attribute, no temperature",
          flat)
    descriptions("synth", os.path.join(tmp, "s.h5"))
    with h5py.File(os.path.join(tmp, "s.h5"), "r") as f:
        check(f["keys"].attrs["description"].startswith("keys after RoPE"), "/keys says 'keys after RoPE'")


def capture_checks(tmp, gguf):
    tokens = os.path.join(tmp, "ids.txt")
    with open(tokens, "w") as f:
        f.write("1 403 407 261 378")
    prompt = os.path.join(tmp, "prompt.txt")
    with open(prompt, "w") as f:
        f.write("Once upon a time")
    cases = [
        ("text", ["--prompt", "Once upon a time, it's", "--generate", "6"], [("model", gguf)], 0, 0.0),
        ("file", ["--prompt-file", prompt, "--generate", "6", "--temperature", "0.8", "--seed", "5"],
         [("model", gguf), ("prompt_file", prompt)], 5, 0.8),
        ("ids", ["--tokens", tokens, "--generate", "3"], [("model", gguf), ("tokens", tokens)], 0, 0.0),
        ("bos", ["--generate", "3"], [("model", gguf)], 0, 0.0),
    ]
    for kind, extra, want, seed, temp in cases:
        args = ["capture", "--model", gguf] + extra + ["-o", "c_%s.h5" % kind, "--quiet"]
        r = run(args, cwd=tmp)
        if not check(r.returncode == 0, "capture with a %s prompt" % kind, r.stderr):
            continue
        flat, rec = h5_record(os.path.join(tmp, "c_%s.h5" % kind))
        check(rec["command"] == command(args) and shlex.split(rec["command"]) == ["kvtrace"] + args and
              rec["argv"] == args and rec["prompt"] == kind and
              rec["seed"] == seed and rec["temperature"] == temp and rec["model"] == gguf and "time" not in rec,
              "capture (%s prompt): command as typed, prompt kind, seed, temperature, no time" % kind, rec)
        check_inputs(rec, want, tmp, "capture (%s prompt): inputs' paths, sizes and sha256 (hashlib)" % kind)
        check_flat("capture (%s)" % kind, flat, rec)
    derived = model_file("derived/stories260K.bin")
    tok = model_file("derived/tok512.bin")
    args = ["capture", "--model", derived, "--tokenizer", tok, "--prompt", "Once", "-o", "l2c.h5", "--quiet"]
    r = run(args, cwd=tmp)
    if check(r.returncode == 0, "capture of a llama2.c checkpoint", r.stderr):
        rec = h5_record(os.path.join(tmp, "l2c.h5"))[1]
        check_inputs(rec, [("model", derived), ("tokenizer", tok)], tmp, "llama2.c: the checkpoint and its tokenizer file are inputs")
    args = ["capture", "--model", gguf, "--prompt", "Once", "--generate", "4", "--attention", "full", "--logits",
            "-o", "full.h5", "--quiet"]
    check(run(args, cwd=tmp).returncode == 0, "capture --attention full --logits")
    descriptions("capture --attention full --logits", os.path.join(tmp, "full.h5"))
    args = ["capture", "--model", gguf, "--generate", "40", "--chunk", "8", "--evict", "streaming", "--budget", "16",
            "--retained", "-o", "ev.h5", "--quiet"]
    check(run(args, cwd=tmp).returncode == 0, "capture --evict --retained")
    descriptions("capture --evict --retained", os.path.join(tmp, "ev.h5"))
    with h5py.File(os.path.join(tmp, "c_text.h5"), "r") as f:
        check("token t+1" in f["logprobs"].attrs["description"], "/logprobs says which token it scores",
              f["logprobs"].attrs["description"])


def time_and_identity(tmp, gguf):
    args = ["capture", "--model", gguf, "--prompt", "Once", "--generate", "4", "-o", "t.h5", "--quiet"]
    for d in ("a", "b", "sde", "ts"):
        os.makedirs(os.path.join(tmp, d))
    ra, rb = run(args, cwd=os.path.join(tmp, "a")), run(args, cwd=os.path.join(tmp, "b"))
    same = ra.returncode == rb.returncode == 0 and open(os.path.join(tmp, "a", "t.h5"), "rb").read() == \
        open(os.path.join(tmp, "b", "t.h5"), "rb").read()
    check(same, "the same capture in two folders: byte-identical traces, provenance included (no time)")
    r = run(args, cwd=os.path.join(tmp, "sde"), env={"SOURCE_DATE_EPOCH": "1700000000"})
    flat, rec = h5_record(os.path.join(tmp, "sde", "t.h5")) if r.returncode == 0 else (None, None)
    check(rec and rec["time"] == "2023-11-14T22:13:20Z" and flat["time"] == rec["time"] and
          rec["time_source"] == "SOURCE_DATE_EPOCH", "SOURCE_DATE_EPOCH=1700000000 gives the time 2023-11-14T22:13:20Z",
          rec)
    r = run(args + ["--timestamp"], cwd=os.path.join(tmp, "ts"))
    rec = h5_record(os.path.join(tmp, "ts", "t.h5"))[1] if r.returncode == 0 else None
    check(rec and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rec.get("time", "")) and
          rec["time_source"] == "--timestamp", "--timestamp records the current time", rec)
    r = run(args[:-3] + ["-o", "bad.h5"], cwd=tmp, env={"SOURCE_DATE_EPOCH": "soon"})
    check(r.returncode == 2 and r.stderr.count("kvtrace: error:") == 1 and "SOURCE_DATE_EPOCH" in r.stderr and
          not os.path.exists(os.path.join(tmp, "bad.h5")), "a malformed SOURCE_DATE_EPOCH: exit 2, one line, no output",
          r.stderr)


def pipeline_checks(tmp, gguf):
    cap = ["capture", "--model", gguf, "--prompt", "Once upon a time", "--generate", "60", "--chunk", "16",
           "-o", "trace.h5", "--quiet"]
    sim = ["sim", "trace.h5", "--policies", "full,streaming,tova", "--budgets", "16,32", "--chunk", "16",
           "-o", "res", "--quiet"]
    ana = ["analyze", "trace.h5", "--results", "res", "-o", "an", "--quiet"]
    plt = ["plot", "an", "-o", "figs", "--quiet"]
    for args in (cap, sim, ana, plt):
        if not check(run(args, cwd=tmp).returncode == 0, "pipeline: %s" % args[0]):
            return
    trace_sha = sha256(os.path.join(tmp, "trace.h5"))
    with h5py.File(os.path.join(tmp, "res", "results.h5"), "r") as f:
        a = dict(f.attrs)
        check(a.get("command") == command(sim) and a.get("trace_path") == "trace.h5" and
              a.get("trace_sha256") == trace_sha and "provenance" in f,
              "results.h5: root attributes command, trace_path, trace_sha256 (hashlib) and /provenance", a)
    flat, rec = h5_record(os.path.join(tmp, "res", "results.h5"))
    check_flat("results.h5", flat, rec)
    side = json.load(open(os.path.join(tmp, "res", "provenance.json")))
    check(side == rec, "results/provenance.json is the record of results.h5's /provenance")
    check_inputs(side, [("trace", "trace.h5")], tmp, "sim: the trace's path, size and sha256")
    check([s["command"] for s in side["steps"]] == [command(cap)], "sim: the step that made the trace is capture's",
          side["steps"])
    an = json.load(open(os.path.join(tmp, "an", "provenance.json")))
    check(an["command"] == command(ana) and [s["command"] for s in an["steps"]] == [command(cap), command(sim)],
          "analyze: provenance.json has its command, then capture and sim as steps", an)
    check_inputs(an, [("trace", "trace.h5"), ("results", "res/results.h5")], tmp, "analyze: the trace and results.h5 with sha256")
    fg = json.load(open(os.path.join(tmp, "figs", "provenance.json")))
    check(fg["command"] == command(plt) and
          [s["command"] for s in fg["steps"]] == [command(cap), command(sim), command(ana)],
          "plot: provenance.json has capture, sim, analyze as steps and its own command", fg)
    read = sorted(p for _, p in [(i["role"], i["path"]) for i in fg["inputs"]])
    check(read and all(p.startswith("an/") for p in read) and "an/meta.csv" in read and
          inputs_ok(fg, [(i["role"], i["path"]) for i in fg["inputs"]], tmp)[0],
          "plot: the analysis files it read, with sha256", read)
    html = open(os.path.join(tmp, "figs", "report.html"), encoding="utf-8").read()
    m = re.search(r'<pre class="commands">(.*?)</pre>', html, re.S)
    shown = [l.replace("&#39;", "'") for l in m.group(1).splitlines()] if m else []
    check(shown == [command(a) for a in (cap, sim, ana, plt)], "the report shows capture, sim, analyze, plot as typed",
          shown)
    info = run(["info", "trace.h5"], cwd=tmp)
    check(info.returncode == 0 and command(cap) in info.stdout and sha256(gguf) in info.stdout,
          "kvtrace info on the trace shows its command and the model's sha256", info.stdout[-800:])
    info = run(["info", "res/results.h5"], cwd=tmp)
    check(info.returncode == 0 and command(sim) in info.stdout and trace_sha in info.stdout and
          command(cap) in info.stdout, "kvtrace info on results.h5: its command, the trace's sha256, capture's step",
          info.stdout + info.stderr)


def fidelity_checks(tmp, gguf):
    args = ["fidelity", "--model", gguf, "--prompt", "Once", "--generate", "40", "--policies", "streaming",
            "--budgets", "16", "--chunk", "8", "-o", "fid", "--quiet"]
    r = run(args, cwd=tmp)
    if not check(r.returncode == 0, "fidelity", r.stderr):
        return
    rec = json.load(open(os.path.join(tmp, "fid", "provenance.json")))
    check(rec["command"] == command(args) and rec["prompt"] == "text" and
          inputs_ok(rec, [("model", gguf)], tmp)[0], "fidelity: provenance.json with the command and the model's sha256",
          rec)
    check(h5_record(os.path.join(tmp, "fid", "full.h5"))[1] == rec, "fidelity: full.h5's /provenance is the same record")
    s = json.load(open(os.path.join(tmp, "fid", "sim", "provenance.json")))
    check(s["command"] == command(args) and
          [(i["path"], i["sha256"]) for i in s["inputs"]] == [("fid/full.h5", sha256(os.path.join(tmp, "fid", "full.h5")))],
          "fidelity: sim/provenance.json names fid/full.h5 and its sha256", s)


def h5py_trace(tmp):
    """A trace written by h5py, without /provenance: sim accepts it and info says it has none."""
    T, D = 24, 4
    rng = np.random.default_rng(0)
    path = os.path.join(tmp, "py.h5")
    with h5py.File(path, "w") as f:
        for k, v in dict(kvtrace_schema=np.array([1, 0]), creator="h5py", model_name="m", architecture="llama",
                         n_layers=1, n_heads=2, n_kv_heads=1, head_dim=D, n_tokens=T, prompt_len=T, vocab_size=10,
                         rope_theta=10000.0, rope_style="interleaved", capture_chunk=0, capture_mode="full",
                         storage_dtype="f32").items():
            f.attrs[k] = v
        f["tokens"] = np.zeros(T, np.int32)
        f["keys"] = rng.standard_normal((1, 1, T, D)).astype(np.float32)
        f["values"] = rng.standard_normal((1, 1, T, D)).astype(np.float32)
        f["queries"] = rng.standard_normal((1, 2, T, D)).astype(np.float32)
    r = run(["sim", path, "--policies", "streaming", "--budgets", "8", "--chunk", "4", "-o", "pyres", "--quiet"],
            cwd=tmp)
    rec = json.load(open(os.path.join(tmp, "pyres", "provenance.json"))) if r.returncode == 0 else {}
    check(r.returncode == 0 and rec.get("steps") == [] and rec["inputs"][0]["sha256"] == sha256(path),
          "an h5py trace without /provenance: sim runs, records its sha256 and no steps", r.stderr)
    info = run(["info", path])
    check(info.returncode == 0 and "provenance    none" in info.stdout, "kvtrace info: 'provenance none' for it",
          info.stdout[-300:])


def main():
    with tempfile.TemporaryDirectory(prefix="kvtrace_prov.") as tmp:
        synth_checks(tmp)
        h5py_trace(tmp)
        gguf = model_file()
        if not gguf:
            for what in ("capture's provenance", "time and identity", "the pipeline's provenance", "fidelity's"):
                skip(what, NO_MODEL)
            return finish()
        gguf = os.path.abspath(gguf)
        capture_checks(tmp, gguf)
        time_and_identity(tmp, gguf)
        pipeline_checks(tmp, gguf)
        fidelity_checks(tmp, gguf)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
