"""`capture --evict-until` against kvpress's own pipeline on SmolLM2-135M-Instruct (docs/fidelity.md, "The context
compressed once"), TAP.

kvpress 0.5.5's KVPressTextGenerationPipeline (transformers' model from the same GGUF, float32, sdpa attention)
compresses a niah prompt's context once at prefill, appends the question uncompressed and decodes greedily; kvtrace
runs the same ids with `capture --evict P --budget N --chunk Tc --evict-until Tc --generate 16`
(bench/peer_kvpress_pipeline.py does both). Checked per press at compression ratio 0.75: the kept sets after the
context (every (layer, kv head): for the presses whose scores kvtrace matches exactly, equal but where a position's
kvpress score is within 1e-4 of the N-th score, relative to the head's largest: two forwards' near-ties; Jaccard >= 0.95 for
snapkv, whose pooled window mean kvpress sums in another order: docs/policies.md, "Agreement with kvpress") and the
answers (the same text: the 16 greedy tokens after an eviction, computed independently by transformers). The
full cache's answer must be correct, else the comparison says little.
Run by tests/run_all.sh with the test venv's Python; KVTRACE and KVTRACE_SMOLLM2 set."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from tap import check, finish, skip  # noqa: E402

KV = os.environ.get("KVTRACE")
GGUF = os.environ.get("KVTRACE_SMOLLM2")
EXACT = ("knorm", "keydiff", "streaming")
# two float32 forwards (transformers', kvtrace's) differ by ~1e-6 relative in the keys (tests/real/test_smollm2_hf.py),
# so scores within ~1e-5 of the threshold may swap; 1e-4 of the head's score scale bounds that with room
TIE = 1e-4


def main():
    if not KV or not GGUF:
        skip("kvpress pipeline", "KVTRACE and KVTRACE_SMOLLM2 are not set (tests/run_all.sh sets them)")
        return finish()
    import peer_kvpress_pipeline as peer
    with tempfile.TemporaryDirectory() as tmp:
        prompts = os.path.join(tmp, "p.jsonl")
        r = subprocess.run([KV, "prompts", "niah", "--depths", "0.5", "--lengths", "512", "--model", GGUF, "--chat",
                            "-o", prompts], capture_output=True, text=True)
        if not check(r.returncode == 0, "prompts niah --chat for SmolLM2", r.stderr):
            return finish()
        x = json.loads(open(prompts).readline())
        p = peer.Peer(GGUF, 2)
        rows = p.compare(KV, tmp, x, ["full", *EXACT, "snapkv"], [0.75], 16)
    by = {r["press"]: r for r in rows}
    full = by["full"]
    check(full["kvpress_correct"] and full["same_answer"], "full cache: both answer %r (kvpress %r, kvtrace %r)" % (
        full["answer"], full["kvpress_answer"], full["kvtrace_answer"]))
    for name in EXACT:
        r = by[name]
        check(r["tie_gap"] <= TIE, "%s, ratio 0.75 (N = %d of %d): the kept sets after the context equal kvpress's "
              "but at near-ties (mean Jaccard %.4f, least %.4f; a differing position's score within %.1e of the "
              "threshold, relative)" % (name, r["budget"], r["context_tokens"], r["jaccard_mean"], r["jaccard_min"],
                                        r["tie_gap"]), "gap %.2e > %.0e" % (r["tie_gap"], TIE))
        check(r["same_answer"], "%s: the answer after the eviction equals kvpress's (%r)" % (name, r["kvpress_answer"]),
              "kvtrace %r" % r["kvtrace_answer"])
    r = by["snapkv"]
    check(r["jaccard_mean"] >= 0.95, "snapkv:preset=kvpress vs SnapKVPress: mean Jaccard %.3f >= 0.95" %
          r["jaccard_mean"])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
