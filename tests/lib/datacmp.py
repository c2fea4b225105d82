"""Byte identity of the data, provenance aside (docs/provenance.md).

kvtrace promises equal data for equal inputs (any --threads, re-runs, another
folder); the provenance record (an HDF5 file's /provenance group and the root
attributes command, trace_path and trace_sha256 of results.h5; a directory's
provenance.json) says how an output was made and may differ. These compare
everything else:

    h5_diff(a, b)        HDF5 files: every object but /provenance, its kind;
                         every attribute (names, types, values) but those above;
                         every dataset's dtype, shape, chunks, filters and values
                         bit for bit (NaN equal to NaN)
    dir_diff(a, b, skip) directories, recursively: the same names; *.h5 by
                         h5_diff, every other file byte for byte

Each returns a list of differences (empty: the same). Also usable as a
command: /usr/bin/python3 tests/lib/datacmp.py A B  (exit 0 when the same).
"""
import filecmp
import os
import sys

import h5py
import numpy as np

PROVENANCE_GROUP = "provenance"
PROVENANCE_ROOT_ATTRS = ("command", "trace_path", "trace_sha256", "study_index", "study_index_sha256")
PROVENANCE_FILE = "provenance.json"


def _same_value(x, y):
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    if x.dtype.names:   # a compound table (results.h5's /index): field by field, NaN equal to NaN
        return all(_same_value(x[f], y[f]) for f in x.dtype.names)
    if x.dtype.kind in "fc":
        return x.tobytes() == y.tobytes() or bool(np.array_equal(x, y, equal_nan=True))
    return bool(np.array_equal(x, y))


def _attrs(name, oa, ob, root):
    out = []
    ka = set(oa.attrs) - (set(PROVENANCE_ROOT_ATTRS) if root else set())
    kb = set(ob.attrs) - (set(PROVENANCE_ROOT_ATTRS) if root else set())
    if ka != kb:
        out.append("%s: attributes only in a %s, only in b %s" % (name, sorted(ka - kb), sorted(kb - ka)))
    for k in sorted(ka & kb):
        ta, tb = oa.attrs.get_id(k).dtype, ob.attrs.get_id(k).dtype
        if ta != tb or not _same_value(oa.attrs[k], ob.attrs[k]):
            out.append("%s@%s: %r vs %r" % (name, k, oa.attrs[k], ob.attrs[k]))
    return out


def _dataset(name, da, db):
    layout = lambda d: (d.dtype, d.shape, d.chunks, d.compression, d.compression_opts, d.shuffle, d.maxshape)
    if layout(da) != layout(db):
        return ["%s: layout %r vs %r" % (name, layout(da), layout(db))]
    if not _same_value(da[()], db[()]):
        return ["%s: values differ" % name]
    return []


def _objects(f):
    names = {}
    f.visititems(lambda n, o: names.setdefault(n, o) if n.split("/")[0] != PROVENANCE_GROUP else None)
    return names


def h5_diff(a, b):
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        out = _attrs("/", fa, fb, True)
        oa, ob = _objects(fa), _objects(fb)
        if set(oa) != set(ob):
            out.append("objects only in one file: %s" % sorted(set(oa) ^ set(ob)))
        for n in sorted(set(oa) & set(ob)):
            x, y = oa[n], ob[n]
            if type(x) is not type(y):
                out.append("/%s: a %s vs a %s" % (n, type(x).__name__, type(y).__name__))
                continue
            out += _attrs("/" + n, x, y, False)
            if isinstance(x, h5py.Dataset):
                out += _dataset("/" + n, x, y)
        return out


def dir_diff(a, b, skip=()):
    """Differences between directories a and b, ignoring provenance.json and the names in skip."""
    ignore = {PROVENANCE_FILE, *skip}
    out = []
    na = sorted(n for n in os.listdir(a) if n not in ignore)
    nb = sorted(n for n in os.listdir(b) if n not in ignore)
    if na != nb:
        out.append("%s vs %s: names %s" % (a, b, sorted(set(na) ^ set(nb))))
    for n in sorted(set(na) & set(nb)):
        pa, pb = os.path.join(a, n), os.path.join(b, n)
        if os.path.isdir(pa) and os.path.isdir(pb):
            out += dir_diff(pa, pb, skip)
        elif n.endswith(".h5"):
            out += ["%s: %s" % (pa, d) for d in h5_diff(pa, pb)]
        elif not filecmp.cmp(pa, pb, shallow=False):
            out.append("%s and %s differ" % (pa, pb))
    return out


if __name__ == "__main__":
    a, b = sys.argv[1:3]
    diffs = dir_diff(a, b) if os.path.isdir(a) else h5_diff(a, b)
    for d in diffs[:20]:
        print(d)
    sys.exit(1 if diffs else 0)
