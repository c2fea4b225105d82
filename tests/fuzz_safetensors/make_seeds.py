#!/usr/bin/env python3
"""Seed corpus for fuzz_safetensors: a few small valid safetensors files.

    python3 tests/fuzz_safetensors/make_seeds.py DIR

floats.safetensors   one F32, one F16 and one BF16 tensor and __metadata__
layer.safetensors    an HF-style layer: 2-D weights, a bias, a scalar and an empty tensor
ints.safetensors     I64 and U8 tensors (parsed, not converted)
not_object.safetensors  a header that is JSON but not an object (refused)
"""
import json
import os
import struct
import sys


def st(tensors, metadata=None):
    """tensors: [(name, dtype, shape, data bytes)]."""
    head, off, blobs = {}, 0, []
    if metadata is not None:
        head["__metadata__"] = metadata
    for name, dt, shape, data in tensors:
        head[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def f32(vals):
    return struct.pack("<%df" % len(vals), *vals)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    v = [0.5 * ((i * 37) % 11 - 5) for i in range(12)]
    seeds = {
        "floats.safetensors": st([("w", "F32", [3, 4], f32(v)),
                                  ("h", "F16", [12], struct.pack("<12e", *v)),
                                  ("b", "BF16", [2, 6], b"".join(struct.pack("<f", x)[2:] for x in v))],
                                 {"format": "pt"}),
        "layer.safetensors": st([("model.layers.0.self_attn.q_proj.weight", "F32", [4, 2], f32(v[:8])),
                                 ("model.layers.0.self_attn.q_proj.bias", "F32", [4], f32(v[:4])),
                                 ("scale", "F32", [], f32([2.0])), ("empty", "F32", [0, 3], b"")]),
        "ints.safetensors": st([("i", "I64", [2], struct.pack("<2q", 1, -2)), ("u", "U8", [3], b"\1\2\3")]),
        "not_object.safetensors": struct.pack("<Q", 8) + b'["w"]   ',
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("%d seeds in %s" % (len(seeds), out))


if __name__ == "__main__":
    main()
