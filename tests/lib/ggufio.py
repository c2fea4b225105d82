"""GGUF files for the tests: a writer (any metadata, F32/F16/BF16/Q8_0 tensors)
and a reader of metadata and F32 tensors. Little-endian GGUF v2/v3."""
import struct

import numpy as np

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
       BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}
T_F32, T_F16, T_Q8_0, T_BF16 = 0, 1, 8, 30


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(value(et, x) for x in items)
    return struct.pack(FMT[t], v)


def quantize_q8_0(a):
    """float rows (ne0 % 32 == 0) -> (Q8_0 bytes, the dequantised values ggml reads back)."""
    blocks = np.asarray(a, dtype=np.float32).reshape(-1, 32)
    amax = np.abs(blocks).max(1)
    d = (amax / 127.0).astype(np.float32)
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0.0)
    q = np.round(blocks * inv[:, None]).astype(np.int8)
    d16 = d.astype(np.float16)
    out = np.empty((blocks.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d16.view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    deq = d16.astype(np.float32)[:, None] * q.astype(np.float32)
    return out.tobytes(), deq.reshape(np.shape(a))


def tensor_bytes(a, gt):
    """(bytes, values read back) of array a stored as ggml type gt."""
    a = np.asarray(a, dtype=np.float32)
    if gt == T_F32:
        return a.astype("<f4").tobytes(), a
    if gt == T_F16:
        h = a.astype("<f2")
        return h.tobytes(), h.astype(np.float32)
    if gt == T_BF16:
        u = a.view(np.uint32).astype(np.uint64)
        b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
        return b.tobytes(), (b.astype(np.uint32) << 16).view(np.float32)
    if gt == T_Q8_0:
        return quantize_q8_0(a)
    raise ValueError(gt)


def gguf(kvs, tensors, version=3, align=32):
    """kvs: [(key, type, value)]; tensors: [(name, dims, ggml_type, data bytes)] (dims ne0 first)."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        head += gstr(k) + struct.pack("<I", t) + value(t, v)
    off, blobs = 0, []
    for name, dims, gt, data in tensors:
        head += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", gt, off)
        pad = data + b"\0" * (-len(data) % align)
        blobs.append(pad)
        off += len(pad)
    head += b"\0" * (-len(head) % align)
    return head + b"".join(blobs)


def read(path):
    """(metadata dict, {name: float32 array [ne1][ne0]} of the F32 tensors)."""
    b = open(path, "rb").read()
    pos = 24
    n_t, n_kv = struct.unpack_from("<QQ", b, 8)
    size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def rstr():
        nonlocal pos
        (n,) = struct.unpack_from("<Q", b, pos)
        pos += 8 + n
        return b[pos - n: pos].decode()

    def rval(t):
        nonlocal pos
        if t == STR:
            return rstr()
        if t == ARR:
            et, n = struct.unpack_from("<IQ", b, pos)
            pos += 12
            return [rval(et) for _ in range(n)]
        (v,) = struct.unpack_from(FMT[t], b, pos)
        pos += size[t]
        return v

    meta = {}
    for _ in range(n_kv):
        k = rstr()
        (t,) = struct.unpack_from("<I", b, pos)
        pos += 4
        meta[k] = rval(t)
    infos = []
    for _ in range(n_t):
        name = rstr()
        (nd,) = struct.unpack_from("<I", b, pos)
        ne = struct.unpack_from("<%dQ" % nd, b, pos + 4)
        pos += 4 + 8 * nd
        t, off = struct.unpack_from("<IQ", b, pos)
        pos += 12
        infos.append((name, ne, t, off))
    start = (pos + meta.get("general.alignment", 32) - 1) // meta.get("general.alignment", 32) * \
        meta.get("general.alignment", 32)
    tensors = {}
    for name, ne, t, off in infos:
        if t != T_F32:
            continue
        n = int(np.prod(ne))
        a = np.frombuffer(b, dtype="<f4", count=n, offset=start + off)
        tensors[name] = a.reshape(tuple(reversed(ne))) if len(ne) > 1 else a
    return meta, tensors
