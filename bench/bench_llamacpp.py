"""make bench (llamacpp): `kvtrace capture` against llama.cpp on the same GGUF files, token ids and threads.

The files (bench/make_bench_gguf.py, made once under BUILD/bench-gguf/GENERATOR-SHA/ with the test venv's gguf
package): SmolLM2-135M-Instruct's GGUF rewritten with its matrices in F32, F16, Q8_0 and Q4_0 (dequantised from
the file's Q4_1, quantised again), and a random model of Llama-3.2-1B's layer shape (4 layers, vocabulary
128,256) in F32, F16, Q8_0, Q4_0 and Q4_K. T = 1024 (4096 too with BENCH_FULL=1, the F32 and F16 files): BOS, then
ids 3 .. 252.

llama.cpp: bench/peer_llamacpp.mjs (node-llama-cpp 3.21.1's prebuilt CPU binary, `make bench-deps`), the whole
prompt in one batch, float32 KV cache, its defaults otherwise (flash attention "auto"), best of 3 evaluations,
the model's load excluded. kvtrace, three ways, each the best of BENCH_CAPTURE_REPS (2) runs alternating with
llama.cpp's: recording keys, values, queries and colsum as `capture` does by default (its logits for every
prompt position, for /logprobs), the same with --no-logprobs (the output layer on each chunk's last row, as
llama.cpp), and --dry-run --no-logprobs (the walk alone, nothing recorded); chunk BENCH_LLAMACPP_CHUNK (512: the
fastest of 128, 256, 512 and 1024 on SmolLM2 and the 4-layer model here; llama.cpp takes the whole prompt at once).
Rates are tokens over the evaluation's seconds (capture --stats' `seconds`: the load excluded); peak RSS is
/usr/bin/time's, mapped weight pages included, of the --no-logprobs recording and of llama.cpp's process.
Goals: recording >= 1.0x and dry-run >= 1.2x on the F32 and F16 files; peak RSS <= 1.2x; the quantised files
are reported (llama.cpp computes their products with integer dot products; kvtrace decodes them to float32),
and on Q8_0 and Q4_0 kvtrace runs a fourth way, `--compute int8 --no-logprobs` (its integer products on int8
rows, docs/capture.md#compute-int8): goal >= 1.0x.
Where node-llama-cpp loads its Sapphire Rapids variant (built with AMX tile instructions), each file at T = 1024
is timed once more with llama.cpp on a copy of the install without that variant (it then loads the next best one
for the CPU), for the record: a row of its own, "report"."""
import hashlib
import os
import shutil

from bench_common import (BUILD, FULL, KV, LLAMACPP_VERSION, ROOT, THREADS, capture_stats, kv_blas, llamacpp_dir, met,
                          peer_python, ratio, run, timed, token_file)

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "make_bench_gguf.py")
SMOLLM2 = ("SmolLM2-135M", ("f32", "f16", "q8_0", "q4_0"))
RANDOM = ("random llama-3.2-1b, 4 layers", ("f32", "f16", "q8_0", "q4_0", "q4_k"))
FLOAT = ("f32", "f16")
CHUNK = os.environ.get("BENCH_LLAMACPP_CHUNK", "512")
REPS = int(os.environ.get("BENCH_CAPTURE_REPS", "2"))


def gguf_dir():
    with open(GEN, "rb") as f:
        d = os.path.join(ROOT, BUILD, "bench-gguf", hashlib.sha256(f.read()).hexdigest()[:12])
    os.makedirs(d, exist_ok=True)
    return d


def model_file(py, smollm2, family, typ):
    """The GGUF of (family, type), made once."""
    name = "%s-%s.gguf" % ("smollm2-135m" if family == SMOLLM2[0] else "random-llama-4l", typ)
    path = os.path.join(gguf_dir(), name)
    if not os.path.exists(path):
        tmp = path + ".tmp"
        if family == SMOLLM2[0]:
            run([py, GEN, "convert", "--type", typ, smollm2, "-o", tmp])
        else:
            run([py, GEN, "random-llama", "--layers", "4", "--type", typ, "--seed", "1", "-o", tmp])
        os.replace(tmp, path)
    return path


def kvtrace_run(model, tok, trace, extra):
    """(tokens/s, peak RSS MiB) of one capture."""
    p, rss = timed([KV, "capture", "--model", model, "--tokens", tok, "--chunk", CHUNK, "--threads", THREADS,
                    "--stats", "--quiet", "--force", "-o", trace] + extra)
    return capture_stats(p.stderr)["tokens_per_s"], rss


def without_sapphirerapids(nm):
    """A copy of node-llama-cpp's modules (made once) without its Sapphire Rapids CPU variant, the one built with
    AMX tile instructions: llama.cpp then loads its next best variant for this CPU. None where the install has
    no such variant."""
    rel = os.path.join("@node-llama-cpp", "linux-x64", "bins", "linux-x64", "libggml-cpu-sapphirerapids.so")
    if not os.path.exists(os.path.join(nm, rel)):
        return None
    d = os.path.join(ROOT, BUILD, "llamacpp-%s-no-sapphirerapids" % LLAMACPP_VERSION, "node_modules")
    if not os.path.isdir(d):
        tmp = d + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(nm, tmp, symlinks=True)
        os.remove(os.path.join(tmp, rel))
        os.replace(tmp, d)
    return d


def llamacpp_run(model, tok, nm):
    p, rss = timed(["node", os.path.join(HERE, "peer_llamacpp.mjs"), "--model", model, "--tokens", tok, "--threads",
                    THREADS, "--reps", "3", "--node-modules", nm])
    f = p.stdout.split()
    return float(f[6]), rss, f[8]


MODES = (("record", []), ("record --no-logprobs", ["--no-logprobs"]), ("dry-run", ["--dry-run", "--no-logprobs"]))
INT8 = ("--compute int8", ["--compute", "int8", "--no-logprobs"])  # the types with int8 products (docs/capture.md)
INT8_TYPES = ("q8_0", "q4_0", "q4_1")


def measure(model, T, tmp, nm, modes):
    """{mode: (best tokens/s, peak RSS)}, llama.cpp's (tokens/s, RSS, backend)."""
    tok = token_file(os.path.join(tmp, "llamacpp-tokens-%d" % T), T)
    trace = os.path.join(tmp, "llamacpp.h5")
    mine, peer = {}, None
    for _ in range(REPS):
        for mode, extra in modes:
            m = kvtrace_run(model, tok, trace, extra)
            mine[mode] = m if mode not in mine or m[0] > mine[mode][0] else mine[mode]
        p = llamacpp_run(model, tok, nm)
        peer = p if peer is None or p[0] > peer[0] else peer
    if os.path.exists(trace):
        os.remove(trace)
    return mine, peer


def int8_kernel(model, tmp):
    """The kernel kvtrace's --compute int8 runs on this machine (--stats' int8_kernel)."""
    tok = token_file(os.path.join(tmp, "llamacpp-tokens-2"), 2)
    p = run([KV, "capture", "--model", model, "--tokens", tok, "--compute", "int8", "--dry-run", "--stats", "-o",
             os.path.join(tmp, "unused.h5")])
    return p.stderr.split("int8_kernel ")[1].split()[0]


def other_variant(model, T, tmp, nm, what, backend, rec, lean, dry):
    """The row of llama.cpp without the variant it chose (for the record: how much of its rate that variant's
    instructions give); kvtrace's rates are the ones measured beside the main peer."""
    tok = token_file(os.path.join(tmp, "llamacpp-tokens-%d" % T), T)
    best = None
    for _ in range(REPS):
        p = llamacpp_run(model, tok, nm)
        best = p if best is None or p[0] > best[0] else best
    lrate, _, other = best
    print("llamacpp: %s: llama.cpp without %s: %.1f tok/s (%s)" % (what, backend, lrate, other))
    return ("`capture` vs llama.cpp without its %s variant: %s (record / --no-logprobs / dry-run)" % (backend, what),
            "%.0f / %.0f / %.0f tok/s" % (rec, lean, dry), "llama.cpp %.0f tok/s (%s)" % (lrate, other),
            "%s / %s / dry-run %s" % (ratio(rec, lrate), ratio(lean, lrate), ratio(dry, lrate)), "report", "—")


def rows(tmp):
    py, ll = peer_python(), llamacpp_dir()
    if not py or not ll:
        why = "the test venv" if not py else "node-llama-cpp %s" % LLAMACPP_VERSION
        print("llamacpp: skipped: %s is not installed (make bench-deps)" % why)
        return [("`capture` vs llama.cpp", "—", "not run (make bench-deps)", "—", ">= 1.0x", "—")]
    nm = os.path.join(ll, "node_modules")
    other = without_sapphirerapids(nm)
    smollm2 = run([KV, "fetch", "smollm2-135m"]).stdout.strip()
    blas, out = kv_blas(), []
    for family, types in (SMOLLM2, RANDOM):
        for typ in types:
            model = model_file(py, smollm2, family, typ)
            for T in (1024, 4096) if FULL and typ in FLOAT else (1024,):
                modes = MODES + ((INT8,) if typ in INT8_TYPES else ())
                mine, (lrate, lrss, backend) = measure(model, T, tmp, nm, modes)
                what = "%s %s, T=%d" % (family, typ.upper(), T)
                print("llamacpp: %s: kvtrace %s (%s, chunk %s); llama.cpp %.1f tok/s, %.0f MiB (%s)" %
                      (what, "; ".join("%s %.1f tok/s, %.0f MiB" % (m, r, s) for m, (r, s) in mine.items()), blas,
                       CHUNK, lrate, lrss, backend))
                rec, lean, dry = (mine[m][0] for m, _ in MODES)
                ratios = "%s / %s / dry-run %s" % (ratio(rec, lrate), ratio(lean, lrate), ratio(dry, lrate))
                now = "%.0f / %.0f / %.0f tok/s" % (rec, lean, dry)
                if typ in FLOAT:
                    verdict = met(min(lean / lrate, dry / lrate / 1.2), goal_min=1.0)
                    out.append(("`capture` vs llama.cpp: %s (record / --no-logprobs / dry-run)" % what, now,
                                "llama.cpp %.0f tok/s (%s)" % (lrate, backend), ratios,
                                ">= 1.0x recording, >= 1.2x dry-run", verdict))
                else:
                    out.append(("`capture` vs llama.cpp: %s (float path; record / --no-logprobs / dry-run)" % what,
                                now, "llama.cpp %.0f tok/s (%s, integer dot products)" % (lrate, backend), ratios,
                                "report", "—"))
                if INT8[0] in mine:
                    r8 = mine[INT8[0]][0]
                    out.append(("`capture --compute int8 --no-logprobs` vs llama.cpp: %s" % what,
                                "%.0f tok/s (int8 kernel: %s)" % (r8, int8_kernel(model, tmp)),
                                "llama.cpp %.0f tok/s (%s)" % (lrate, backend), ratio(r8, lrate), ">= 1.0x",
                                met(r8 / lrate, goal_min=1.0)))
                if other and T == 1024 and backend == "ggml-cpu-sapphirerapids":
                    out.append(other_variant(model, T, tmp, other, what, backend, rec, lean, dry))
                rss = mine["record --no-logprobs"][1]
                out.append(("`capture` peak RSS vs llama.cpp: %s" % what, "%.0f MiB" % rss, "llama.cpp %.0f MiB" % lrss,
                            ratio(rss, lrss), "<= 1.2x", met(rss / lrss, goal_max=1.2)))
                if INT8[0] in mine:  # with its packed copy of the int8 matrices (docs/capture.md#compute-int8)
                    rss8 = mine[INT8[0]][1]
                    out.append(("`capture --compute int8` peak RSS vs llama.cpp: %s" % what, "%.0f MiB" % rss8,
                                "llama.cpp %.0f MiB" % lrss, ratio(rss8, lrss), "<= 1.2x",
                                met(rss8 / lrss, goal_max=1.2)))
    return out
