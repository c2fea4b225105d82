#!/usr/bin/python3
"""h5py interoperability of the trace format (docs/trace.md), both ways.

Run as: /usr/bin/python3 tests/scripts/test_h5py_interop.py
(tests/run_all.sh sets KVTRACE to the kvtrace binary and ROOT to the repo root.)

a. traces written by `kvtrace synth` read with plain h5py: attributes, shapes,
   element types, chunking, filters, no object timestamps, f16 = rounded f32,
   and /attention/colsum against a float64 numpy reference;
b. traces written by h5py in the other legal ways (any integer type, fixed-length
   strings, float32/integer rope_theta, float16 storage, gzip+shuffle, int64
   tokens, float64 colsum, a newer schema minor) accepted by `kvtrace info`;
c. h5py traces that `kvtrace info` must refuse with exit 3 and one error line.

Prints TAP lines; exits non-zero if any check fails.
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402

ROOT = os.environ.get("ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KVTRACE = os.environ.get("KVTRACE") or os.path.join(ROOT, "build", "kvtrace")

def kvtrace(*args):
    p = subprocess.run([KVTRACE] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def show(rc, out, err):
    return "exit %s\nstdout: %s\nstderr: %s" % (rc, out.strip()[:1500], err.strip()[:1500])


# ---------------------------------------------------------------------------
# Object timestamps. h5py's get_create_plist().get_obj_track_times() cannot be
# used: with version-1 object headers (HDF5's default, libver 'earliest') the
# library reports the default (True) whatever the file holds. So read the
# object header itself and look for a modification-time message (type 0x0012,
# or the old 0x000E) — version 1 — or the "times stored" flag — version 2.

def _read(fh, addr, n):
    fh.seek(addr)
    b = fh.read(n)
    if len(b) != n:
        raise ValueError("short read at %d" % addr)
    return b


def object_header_times(path, addr):
    """True if the object header at `addr` stores timestamps (8-byte offsets/lengths assumed)."""
    with open(path, "rb") as fh:
        head = _read(fh, addr, 16)
        if head[:4] == b"OHDR":
            flags = head[5]
            return bool(flags & 0x20)
        if head[0] != 1:
            raise ValueError("unknown object header version %d at %d" % (head[0], addr))
        nmsgs, _refc, size = struct.unpack("<HII", head[2:12])
        blocks = [(addr + 16, size)]
        seen = 0
        while blocks and seen < nmsgs:
            start, length = blocks.pop(0)
            pos = start
            while pos + 8 <= start + length and seen < nmsgs:
                mtype, msize, _mflags = struct.unpack("<HHB", _read(fh, pos, 5))
                seen += 1
                if mtype in (0x0012, 0x000E):
                    return True
                if mtype == 0x0010:  # continuation: offset, length
                    coff, clen = struct.unpack("<QQ", _read(fh, pos + 8, 16))
                    blocks.append((coff, clen))
                pos += 8 + msize
        return False


def all_objects(f):
    objs = [("/", f)]
    f.visititems(lambda name, o: objs.append(("/" + name, o)))
    return objs


def timestamped_objects(path):
    with h5py.File(path, "r") as f:
        addrs = [(name, h5py.h5o.get_info(o.id).addr) for name, o in all_objects(f)]
    return [name for name, addr in addrs if object_header_times(path, addr)]


# ---------------------------------------------------------------------------
# Reference attention column sums

def colsum_ref(q, k):
    """q [T, D], k [T, D]: sum over i >= j of the causal softmax weight, in float64."""
    q = q.astype(np.float64)
    k = k.astype(np.float64)
    T, D = q.shape
    s = (q @ k.T) / np.sqrt(D)
    s[np.triu_indices(T, 1)] = -np.inf
    s -= s.max(axis=1, keepdims=True)
    w = np.exp(s)
    w /= w.sum(axis=1, keepdims=True)
    return w.sum(axis=0)


# ---------------------------------------------------------------------------
# a. kvtrace writes, h5py reads

def part_a(tmp):
    paths = {}
    for name, extra in (("f32", []), ("f16", ["--dtype", "f16", "--deflate", "4"])):
        p = os.path.join(tmp, "synth_%s.h5" % name)
        rc, out, err = kvtrace("synth", "--like", "stories260k", "--tokens", 300, "--seed", 3,
                               *extra, "-o", p)
        ok = check(rc == 0 and os.path.isfile(p), "synth %s trace written" % name,
                   lambda: show(rc, out, err))
        paths[name] = p if ok else None

    expected_ints = dict(n_layers=5, n_heads=8, n_kv_heads=4, head_dim=8, vocab_size=512,
                         n_tokens=300, prompt_len=300, capture_chunk=0)
    for name, p in paths.items():
        if p is None:
            continue
        with h5py.File(p, "r") as f:
            a = f.attrs
            sch = a.get("kvtrace_schema")
            check(sch is not None and np.asarray(sch).dtype.kind in "iu"
                  and np.asarray(sch).tolist() == [1, 0],
                  "%s: kvtrace_schema is an integer [1, 0]" % name, "got %r" % (sch,))
            for k, v in expected_ints.items():
                got = a.get(k)
                check(got is not None and np.asarray(got).shape == () and np.asarray(got).dtype.kind in "iu"
                      and int(got) == v, "%s: integer scalar attribute %s = %d" % (name, k, v),
                      "got %r (%s)" % (got, type(got).__name__))
            strs = dict(architecture="llama", rope_style="interleaved", capture_mode="full",
                        storage_dtype=name, model_name=None, creator=None)
            for k, v in strs.items():
                got = a.get(k)
                tid = a.get_id(k).get_type() if k in a else None
                vlen_utf8 = (tid is not None and isinstance(tid, h5py.h5t.TypeStringID)
                             and tid.is_variable_str() and tid.get_cset() == h5py.h5t.CSET_UTF8)
                check(isinstance(got, str) and vlen_utf8 and (v is None or got == v) and got != "",
                      "%s: attribute %s is a variable-length UTF-8 string%s" % (
                          name, k, "" if v is None else " = '%s'" % v),
                      "got %r (%s), vlen utf-8: %s" % (got, type(got).__name__, vlen_utf8))
            check(isinstance(a.get("creator"), str) and a["creator"].startswith("kvtrace"),
                  "%s: creator names the program" % name, "got %r" % (a.get("creator"),))
            th = a.get("rope_theta")
            check(th is not None and np.asarray(th).dtype.kind == "f" and float(th) == 10000.0,
                  "%s: rope_theta is a float = 10000" % name, "got %r" % (th,))

            sdt = np.float16 if name == "f16" else np.float32
            want = {"keys": ((5, 4, 300, 8), sdt), "values": ((5, 4, 300, 8), sdt),
                    "queries": ((5, 8, 300, 8), sdt), "attention/colsum": ((5, 8, 300), np.float32),
                    "tokens": ((300,), np.int32)}
            for ds, (shape, dt) in want.items():
                d = f.get(ds)
                check(isinstance(d, h5py.Dataset) and d.shape == shape and d.dtype == np.dtype(dt),
                      "%s: /%s is %s %s" % (name, ds, np.dtype(dt).name, list(shape)),
                      lambda: "got %r" % ((d.shape, d.dtype) if isinstance(d, h5py.Dataset) else d,))
            for ds in ("keys", "values", "queries"):
                c = f[ds].chunks
                check(c is not None and len(c) == 4 and c[0] == 1 and c[1] == 1 and 1 <= c[2] <= 256
                      and c[3] == 8, "%s: /%s chunked (1, 1, t<=256, 8)" % (name, ds), "chunks %r" % (c,))
            for ds in want:
                d = f[ds]
                if name == "f16":
                    check(d.compression == "gzip" and d.shuffle and d.compression_opts == 4,
                          "%s: /%s is gzip(4)+shuffle" % (name, ds),
                          "compression %r opts %r shuffle %r" % (d.compression, d.compression_opts, d.shuffle))
                else:
                    check(d.compression is None and not d.shuffle and not d.fletcher32,
                          "%s: /%s has no filters" % (name, ds),
                          "compression %r shuffle %r" % (d.compression, d.shuffle))
            toks = f["tokens"][()]
            check(toks.min() >= 0 and toks.max() < 512, "%s: token ids inside the vocabulary" % name,
                  "min %d max %d" % (toks.min(), toks.max()))
        try:
            stamped = timestamped_objects(p)
            check(stamped == [], "%s: no object timestamps in any object header" % name,
                  "objects with a modification time: %s" % stamped)
        except Exception as e:
            check(False, "%s: no object timestamps in any object header" % name, repr(e))

    # The detector above must see timestamps where h5py put them (else it proves nothing).
    probe = os.path.join(tmp, "probe_times.h5")
    with h5py.File(probe, "w") as f:
        f.create_dataset("with", data=np.zeros(4), chunks=(4,), track_times=True)
        f.create_dataset("without", data=np.zeros(4), chunks=(4,), track_times=False)
    try:
        stamped = timestamped_objects(probe)
        check("/with" in stamped and "/without" not in stamped,
              "timestamp detector: finds h5py's track_times=True, not track_times=False",
              "detected on %s" % stamped)
    except Exception as e:
        check(False, "timestamp detector works on an h5py file", repr(e))

    if not (paths.get("f32") and paths.get("f16")):
        return
    with h5py.File(paths["f32"], "r") as f32, h5py.File(paths["f16"], "r") as f16:
        for ds in ("keys", "values", "queries"):
            a32 = f32[ds][()]
            a16 = f16[ds][()]
            r = a32.astype(np.float16)
            same = np.array_equal(r.view(np.uint16), a16.view(np.uint16))
            check(same, "f16 /%s equals the f32 /%s rounded to float16 (same seed)" % (ds, ds),
                  lambda: "%d of %d elements differ; first at %s: f32 %r -> numpy %r, kvtrace %r" % (
                      int((r.view(np.uint16) != a16.view(np.uint16)).sum()), r.size,
                      np.argwhere(r.view(np.uint16) != a16.view(np.uint16))[0].tolist(),
                      *(x[tuple(np.argwhere(r.view(np.uint16) != a16.view(np.uint16))[0])]
                        for x in (a32, r, a16))))
        check(np.array_equal(f32["tokens"][()], f16["tokens"][()]), "f32 and f16 traces have the same tokens")

        # colsum is computed from the generated float32 Q and K (as a capture computes it
        # from the model's own attention), before any rounding to float16: so the reference
        # for both traces uses the float32 trace's queries and keys.
        q = f32["queries"][()]
        k = f32["keys"][()]
        L_, H_, T_, D_ = q.shape
        G = H_ // k.shape[1]
        c32 = f32["attention/colsum"][()]
        c16 = f16["attention/colsum"][()]
        check(np.array_equal(c32, c16), "f16 trace has the same /attention/colsum as the f32 trace",
              lambda: "max |diff| %.3g" % float(np.abs(c32.astype(np.float64) - c16).max()))
        check(bool(np.isfinite(c32).all() and (c32 >= 0).all()), "colsum finite and non-negative")
        for (l, h) in ((0, 0), (2, 5), (4, 7)):
            ref = colsum_ref(q[l, h], k[l, h // G])
            got = c32[l, h].astype(np.float64)
            bad = np.abs(got - ref) > 1e-5 + 1e-4 * np.abs(ref)
            check(not bad.any(),
                  "colsum[layer %d, head %d] matches a float64 causal softmax with kv head %d" % (l, h, h // G),
                  lambda: "%d of %d columns off; max |diff| %.3g; first j=%d got %.9g ref %.9g" % (
                      int(bad.sum()), T_, float(np.abs(got - ref).max()),
                      int(np.argmax(bad)), got[np.argmax(bad)], ref[np.argmax(bad)]))
        # the grouping matters: the neighbouring kv head must not also match
        l, h = 2, 5
        wrong = colsum_ref(q[l, h], k[l, (h // G + 1) % k.shape[1]])
        check(not np.allclose(c32[l, h], wrong, rtol=1e-4, atol=1e-5),
              "colsum[layer 2, head 5] does not match kv head %d (grouping is h / (H/K))" % ((h // G + 1) % k.shape[1]))
        sums = c32.astype(np.float64).sum(axis=2)
        worst = float(np.abs(sums - T_).max())
        check(worst <= 1e-3, "every (layer, head) colsum adds up to T = %d (rows sum to 1)" % T_,
              "worst |sum - T| = %.3g" % worst)


# ---------------------------------------------------------------------------
# b/c. h5py writes, kvtrace reads

L, H, K, D, T, V = 2, 4, 2, 8, 40, 100


def write_trace(path, ints=np.int64, schema=(1, 0), schema_dtype=np.int64, strings="vlen",
                theta=np.float64(10000.0), storage="f32", data_dtype=None, compression=None,
                tokens_dtype=np.int32, colsum_dtype=np.float32, tokens=None, drop_attrs=(),
                with_queries=True, with_colsum=True, seed=0):
    """A minimal trace written the h5py way, with the requested variations."""
    rng = np.random.default_rng(seed)
    if data_dtype is None:
        data_dtype = np.float16 if storage == "f16" else np.float32
    kw = {}
    if compression == "gzip":
        kw = dict(compression="gzip", compression_opts=4, shuffle=True, chunks=True)
    with h5py.File(path, "w") as f:
        a = f.attrs
        if schema is not None:
            a.create("kvtrace_schema", np.array(schema, dtype=schema_dtype))
        for k, v in dict(n_layers=L, n_heads=H, n_kv_heads=K, head_dim=D, n_tokens=T,
                         prompt_len=T, vocab_size=V, capture_chunk=0).items():
            a.create(k, ints(v))
        strs = dict(creator="h5py test %s" % h5py.__version__, model_name="h5py:tiny",
                    architecture="llama", rope_style="neox", capture_mode="full",
                    storage_dtype=storage)
        for k, v in strs.items():
            if strings == "vlen":
                a[k] = v  # h5py: variable-length UTF-8
            elif strings == "bytes":
                a[k] = np.bytes_(v)  # fixed length, exactly len(v), ASCII, null-padded
            elif strings == "bytes_wide":
                a.create(k, np.bytes_(v), dtype="S32")  # fixed length with trailing padding
            elif strings == "fixed_utf8":
                a.create(k, v.encode(), dtype=h5py.string_dtype("utf-8", 24))
            else:
                raise ValueError(strings)
        a["rope_theta"] = theta
        for k in drop_attrs:
            del a[k]
        if tokens is None:
            tokens = rng.integers(0, V, size=T)
        f.create_dataset("tokens", data=np.asarray(tokens).astype(tokens_dtype), **kw)
        f.create_dataset("keys", data=rng.standard_normal((L, K, T, D)).astype(data_dtype), **kw)
        f.create_dataset("values", data=rng.standard_normal((L, K, T, D)).astype(data_dtype), **kw)
        if with_queries:
            f.create_dataset("queries", data=rng.standard_normal((L, H, T, D)).astype(data_dtype), **kw)
        if with_colsum:
            f.create_dataset("attention/colsum", data=rng.uniform(0, 3, (L, H, T)).astype(colsum_dtype), **kw)


def info_lines(out):
    """{dataset path: the rest of its line} from `kvtrace info` output."""
    rows = {}
    for line in out.splitlines():
        s = line.strip()
        if s.startswith("/"):
            name, _, rest = s.partition(" ")
            rows[name] = rest
    return rows


def part_b(tmp):
    cases = [
        ("baseline: int64 attributes, vlen str, float64 rope_theta, f32", {}, {}),
        ("integer attributes as int32", dict(ints=np.int32), {}),
        ("integer attributes as uint8", dict(ints=np.uint8), {}),
        ("integer attributes as int16", dict(ints=np.int16), {}),
        ("kvtrace_schema int32 [1, 3] (newer minor)", dict(schema=(1, 3), schema_dtype=np.int32),
         {"schema": "1.3"}),
        ("kvtrace_schema uint8 [1, 0]", dict(schema_dtype=np.uint8), {}),
        ("string attributes as fixed-length bytes (np.bytes_)", dict(strings="bytes"), {}),
        ("string attributes as fixed-length S32 (null-padded)", dict(strings="bytes_wide"), {}),
        ("string attributes as fixed-length UTF-8", dict(strings="fixed_utf8"), {}),
        ("rope_theta as float32", dict(theta=np.float32(10000.0)), {}),
        ("rope_theta as int64", dict(theta=np.int64(10000)), {}),
        ("rope_theta as int32", dict(theta=np.int32(500000)), {"theta": "500000"}),
        ("keys/values/queries float16 with storage_dtype f16", dict(storage="f16"),
         {"type": "float16", "storage": "f16"}),
        ("gzip+shuffle compression", dict(compression="gzip"), {"filters": True}),
        ("f16 + gzip+shuffle", dict(storage="f16", compression="gzip"),
         {"type": "float16", "storage": "f16", "filters": True}),
        ("tokens as int64", dict(tokens_dtype=np.int64), {"tokens": "int64"}),
        ("tokens as uint16", dict(tokens_dtype=np.uint16), {"tokens": "uint16"}),
        ("colsum as float64", dict(colsum_dtype=np.float64), {"colsum": "float64"}),
        ("colsum as float16", dict(colsum_dtype=np.float16), {"colsum": "float16"}),
        ("no /queries and no /attention/colsum (both optional)",
         dict(with_queries=False, with_colsum=False), {"absent": ["/queries", "/attention/colsum"]}),
        ("everything at once: int32 attrs, bytes strings, f16, gzip, int64 tokens, f64 colsum",
         dict(ints=np.int32, schema=(1, 7), schema_dtype=np.int32, strings="bytes",
              theta=np.float32(10000.0), storage="f16", compression="gzip", tokens_dtype=np.int64,
              colsum_dtype=np.float64),
         {"schema": "1.7", "type": "float16", "storage": "f16", "filters": True, "tokens": "int64",
          "colsum": "float64"}),
    ]
    for i, (desc, kw, expect) in enumerate(cases):
        p = os.path.join(tmp, "ok_%02d.h5" % i)
        try:
            write_trace(p, seed=i, **kw)
        except Exception as e:
            check(False, "info accepts h5py trace: %s" % desc, "h5py could not write it: %r" % (e,))
            continue
        rc, out, err = kvtrace("info", p)
        rows = info_lines(out)
        dtype = expect.get("type", "float32")
        problems = []
        if rc != 0 or err.strip():
            check(False, "info accepts h5py trace: %s" % desc, show(rc, out, err))
            continue
        if "schema        %s" % expect.get("schema", "1.0") not in out:
            problems.append("schema %s not shown" % expect.get("schema", "1.0"))
        if "storage       %s" % expect.get("storage", "f32") not in out:
            problems.append("storage %s not shown" % expect.get("storage", "f32"))
        if "L=%d layers, H=%d heads, K=%d kv heads, D=%d head dim, V=%d vocab" % (L, H, K, D, V) not in out:
            problems.append("dimensions line missing or wrong")
        if "T=%d " % T not in out:
            problems.append("token count T=%d not shown" % T)
        if "theta" in expect and "theta %s" % expect["theta"] not in out:
            problems.append("rope theta %s not shown" % expect["theta"])
        shapes = {"/tokens": "[%d]" % T, "/keys": "[%d, %d, %d, %d]" % (L, K, T, D),
                  "/values": "[%d, %d, %d, %d]" % (L, K, T, D),
                  "/queries": "[%d, %d, %d, %d]" % (L, H, T, D),
                  "/attention/colsum": "[%d, %d, %d]" % (L, H, T)}
        types = {"/tokens": expect.get("tokens", "int32"), "/keys": dtype, "/values": dtype,
                 "/queries": dtype, "/attention/colsum": expect.get("colsum", "float32")}
        for ds in shapes:
            if ds in expect.get("absent", []):
                if ds in rows:
                    problems.append("%s listed but not in the file" % ds)
                continue
            r = rows.get(ds)
            if r is None:
                problems.append("%s not listed" % ds)
                continue
            fields = r.replace(", ", ",").split()
            if shapes[ds].replace(", ", ",") not in fields:
                problems.append("%s shape %s not shown" % (ds, shapes[ds]))
            if types[ds] not in fields:
                problems.append("%s type %s not shown" % (ds, types[ds]))
            if expect.get("filters") and not ("deflate" in r and "shuffle" in r):
                problems.append("%s filters not shown as deflate+shuffle" % ds)
            if not expect.get("filters") and "none" not in fields:
                problems.append("%s filters not shown as none" % ds)
        check(not problems, "info accepts h5py trace: %s" % desc,
              lambda: "; ".join(problems) + "\n" + show(rc, out, err))


def part_c(tmp):
    bad_tokens = np.arange(T) % V
    bad_tokens[17] = V  # == vocab_size
    cases = [
        ("keys stored as float64", dict(data_dtype=np.float64), ["/keys", "float64"]),
        ("storage_dtype f16 but keys float32", dict(storage="f16", data_dtype=np.float32),
         ["/keys", "float32", "f16"]),
        ("storage_dtype f32 but keys float16", dict(storage="f32", data_dtype=np.float16),
         ["/keys", "float16"]),
        ("a token id equal to vocab_size", dict(tokens=bad_tokens), ["/tokens", "vocabulary"]),
        ("a negative token id", dict(tokens=np.where(np.arange(T) == 3, -1, 1)), ["/tokens", "vocabulary"]),
        ("kvtrace_schema [2, 0] (other major)", dict(schema=(2, 0)), ["schema"]),
        ("no kvtrace_schema attribute", dict(schema=None), ["kvtrace_schema"]),
        ("missing rope_style attribute", dict(drop_attrs=("rope_style",)), ["rope_style"]),
        ("storage_dtype 'f64'", dict(storage="f64", data_dtype=np.float64), ["storage_dtype"]),
    ]
    for i, (desc, kw, words) in enumerate(cases):
        p = os.path.join(tmp, "bad_%02d.h5" % i)
        try:
            write_trace(p, seed=100 + i, **kw)
        except Exception as e:
            check(False, "info refuses: %s" % desc, "h5py could not write it: %r" % (e,))
            continue
        rc, out, err = kvtrace("info", p)
        lines = err.splitlines()
        problems = []
        if rc != 3:
            problems.append("exit %d, expected 3" % rc)
        if len(lines) != 1:
            problems.append("stderr has %d lines, expected 1" % len(lines))
        elif not lines[0].startswith("kvtrace: error: "):
            problems.append("stderr does not start with 'kvtrace: error: '")
        missing = [w for w in words if w.lower() not in err.lower()]
        if missing:
            problems.append("message does not mention %s" % missing)
        if os.path.basename(p) not in err:
            problems.append("message does not name the file")
        check(not problems, "info refuses h5py trace (exit 3, one line naming it): %s" % desc,
              lambda: "; ".join(problems) + "\n" + show(rc, out, err))
    # NaN in /keys: info reads metadata only (docs/trace.md#validation: values are checked when read), so not tested here.


def main():
    if not (os.path.isfile(KVTRACE) and os.access(KVTRACE, os.X_OK)):
        print("not ok 1 - kvtrace binary at %s" % KVTRACE)
        print("# build it with make, or set KVTRACE")
        print("1..1")
        return 1
    tmp = tempfile.mkdtemp(prefix="kvtrace_h5py_")
    try:
        part_a(tmp)
        part_b(tmp)
        part_c(tmp)
    except Exception:  # an unexpected crash is one more failure, reported in TAP
        import traceback
        check(False, "test script ran to the end", traceback.format_exc())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
