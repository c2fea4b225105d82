#!/usr/bin/env python3
"""Seed corpus for fuzz_csv: files shaped like the analysis directory's CSVs
(docs/analysis_dir.md) and a few writer round trips.

    python3 tests/fuzz_csv/make_seeds.py DIR

Byte 0 picks the harness's target: 0 reads the rest as a CSV file, 1 writes
the NUL-separated cells after byte 1 (column count - 1, bit 7 = flatten) and
reads them back (tests/fuzz_csv/fuzz_csv.c).
"""
import os
import sys

READ = {
    "meta.csv": "key,value\nmodel,stories260K\nn_layers,5\nn_heads,8\nn_kv_heads,4\nhead_dim,8\n"
                "detail_layer,0\ndetail_head,0\n",
    "spearman.csv": "layer,head,rho,n\n0,0,0.8125,512\n0,1,-0.03125,512\n1,0,nan,512\n",
    "logdet.csv": "config,policy,params,budget,layer,kv_head,logdet\n"
                  "full_cache,full_cache,,0,0,0,-12.5\n\"keydiff:window=8,sink=4\",keydiff,"
                  "\"window=8,sink=4\",64,0,0,-1.25e+01\n",
    "pca.csv": "layer,kv_head,position,pc1,pc2\r\n0,0,0,1.5,-2.25\r\n0,0,1,3e-308,-0\r\n",
    "detail.csv": "matrix,row,col,value\nkeys,0,0,0.125\nkeys,0,1,-1e308\nattention,63,63,4.9e-324\n",
    "summary.csv": "config,policy,params,budget,mean_error,note\n"
                   "full,full,,0,0,\"a \"\"quoted\"\" note\"\nh2o,h2o,,16,0.5,\n",
    "truncated.csv": "layer,head,rho\n0,0,0.81\n0,1,0.7",
    "one_column.csv": "x\n1\n2\n3\n",
}

TRIPS = {
    "trip_plain": (3, False, ["full", "16", "0.5", "keydiff:window=8", "32", "-1e-3"]),
    "trip_quotes": (2, False, ['a,b', 'say "hi"', '"', ',', '', 'x']),
    "trip_flatten": (2, True, ["line\nbreak", "cr\rlf\r\n", "tab\there", "\"q\",\n"]),
    "trip_one": (1, False, ["only", "column", "x,y"]),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    for name, text in READ.items():
        with open(os.path.join(out, "read_" + name), "wb") as f:
            f.write(b"\0" + text.encode())
    for name, (cols, flatten, cells) in TRIPS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(b"\1" + bytes([(cols - 1) | (0x80 if flatten else 0)]) +
                    b"\0".join(c.encode() for c in cells))
    print("%d seeds in %s" % (len(READ) + len(TRIPS), out))


if __name__ == "__main__":
    main()
