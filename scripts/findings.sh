#!/usr/bin/env bash
# The study behind docs/findings.md on SmolLM2-135M-Instruct, in resumable pieces:
#   scripts/findings.sh [--resume] [PIECE ...] [-o DIR]     (default: every piece, DIR out/findings)
# Pieces (each a directory of DIR; under --resume the cells a piece has finished are skipped):
#   full     full-cache exact match of every RULER task at 1K and 2K tokens (6 prompts a cell), with
#            streaming at a quarter of the length as the cheap evicting run fidelity needs
#   prose    the same for niah in real prose (scripts/fetch-haystack.sh: The Adventures of Sherlock Holmes, as
#            a Debian package ships it) instead of RULER's noise sentences
#   screen   offline: one f16 trace per niah prompt at 1K and 2K, sim over the policies under the uniform and
#            adakv allocators, budgets of 10, 25 and 50% of the length, prefill chunks 128, 512 and the whole
#            prompt (one shot) (needle retention, attention recall, output error), analyze (Spearman rho per
#            layer and head, log-det); the traces are deleted after their replay
#   inmodel  in-model exact match under eviction for niah at 1K: the policies at a quarter of the length,
#            prefill chunks 128, 512 and one shot, paired against the full cache; at 2K the same, chunk 128
#   budgets  in-model exact match for niah at 1K at the other budgets, 10% and 50% of the length, prefill chunk
#            128, for the seven policies, and snapkv under the adakv allocator at 10, 25 and 50%
#   peers    the headline cell, 50 niah prompts at 1K (depths 0, 0.25, 0.5, 0.75, 1 x seeds 0-9): kvpress 0.5.5's
#            own pipeline and kvtrace's capture --evict-until (the context compressed once, the question kept)
#            for keydiff, snapkv, tova, streaming and expected_attention at a quarter of the context, and kvtrace
#            under chunked prefill (B = 128, every step evicting) at the same budget
#            (bench/peer_kvpress_pipeline.py; the test venv, made or found by tests/lib/real_setup.sh)
# Each piece prints its wall time; docs/findings.md reads the CSVs they write.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KV=${KVTRACE:-$ROOT/build/kvtrace}
OUT=out/findings
RESUME=0
PIECES=()
while [ $# -gt 0 ]; do
    case "$1" in
        --resume) RESUME=1 ;;
        -o) OUT=$2; shift ;;
        full|prose|screen|inmodel|budgets|peers) PIECES+=("$1") ;;
        -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
        *) echo "findings.sh: unknown argument '$1' (pieces: full prose screen inmodel budgets peers; --resume; -o DIR)" >&2
           exit 2 ;;
    esac
    shift
done
[ ${#PIECES[@]} -gt 0 ] || PIECES=(full prose screen inmodel budgets peers)
MODEL=${FINDINGS_MODEL:-smollm2-135m}
TASKS=(niah multikey multivalue multiquery vt cwe)
LENGTHS=(${FINDINGS_LENGTHS:-1024 2048})   # FINDINGS_LENGTHS="1024": one length only
DEPTHS=0,0.5,1
SEEDS=0,1
POLICIES=keydiff,keydiff:window=0.1,snapkv,tova,h2o,streaming,expected_attention
mkdir -p "$OUT"

timed() { # NAME CMD...: run, then add the wall seconds to DIR/NAME/seconds (a resumed piece's earlier runs kept)
    local name=$1 t0 before=0; shift
    t0=$(date +%s)
    [ "$RESUME" = 1 ] && [ -f "$OUT/$name/seconds" ] && before=$(cat "$OUT/$name/seconds")
    "$@"
    echo $(( before + $(date +%s) - t0 )) > "$OUT/$name/seconds"
    echo "findings: $name took $(cat "$OUT/$name/seconds") s"
}

prompts_for() { # TASK LENGTH FILE (cwe: no depths, six seeds; 10 entries a common word at 1K, where 30 do not fit)
    if [ "$1" = cwe ]; then
        "$KV" prompts cwe --model "$MODEL" --chat --lengths "$2" --seeds 0,1,2,3,4,5 \
            $([ "$2" -lt 2048 ] && echo --frequency 10) --force -o "$3"
    else
        "$KV" prompts "$1" --model "$MODEL" --chat --lengths "$2" --depths "$DEPTHS" --seeds "$SEEDS" --force -o "$3"
    fi
}

full_piece() {
    mkdir -p "$OUT/full"
    for task in "${TASKS[@]}"; do
        for L in "${LENGTHS[@]}"; do
            local d=$OUT/full/$task-$L
            if [ "$RESUME" = 1 ] && [ -f "$d/answer.csv" ]; then continue; fi
            prompts_for "$task" "$L" "$OUT/full/$task-$L.jsonl"
            "$KV" fidelity --model "$MODEL" --prompts "$OUT/full/$task-$L.jsonl" --policies streaming \
                --budgets $((L / 4)) --chunk 128 --quiet --force -o "$d"
            find "$d" -name full.h5 -delete
        done
    done
}

prose_piece() {
    local hay
    hay=$("$ROOT/scripts/fetch-haystack.sh")
    for L in "${LENGTHS[@]}"; do
        local d=$OUT/prose/niah-$L
        if [ "$RESUME" = 1 ] && [ -f "$d/answer.csv" ]; then continue; fi
        "$KV" prompts niah --model "$MODEL" --chat --haystack "$hay" --lengths "$L" --depths "$DEPTHS" \
            --seeds "$SEEDS" --force -o "$OUT/prose/niah-$L.jsonl"
        "$KV" fidelity --model "$MODEL" --prompts "$OUT/prose/niah-$L.jsonl" --policies streaming \
            --budgets $((L / 4)) --chunk 128 --quiet --force -o "$d"
        find "$d" -name full.h5 -delete
    done
}

screen_piece() {
    mkdir -p "$OUT/screen"
    for L in "${LENGTHS[@]}"; do
        local d=$OUT/screen/niah-$L
        if [ "$RESUME" = 1 ] && [ -f "$d/an/spans_summary.csv" ]; then continue; fi
        mkdir -p "$d"
        prompts_for niah "$L" "$OUT/screen/niah-$L.jsonl"
        "$KV" capture --model "$MODEL" --prompts "$OUT/screen/niah-$L.jsonl" --dtype f16 --quiet --force \
            -o "$d/study"
        "$KV" sim "$d/study" --policies "$POLICIES" --allocators uniform,adakv \
            --budgets $((L / 10)),$((L / 4)),$((L / 2)) --chunks 128,512,"$L" --quiet --force -o "$d/res"
        "$KV" analyze "$d/study" --results "$d/res" --quiet --force -o "$d/an"
        rm -rf "$d/study"
    done
}

inmodel_cell() { # LENGTH CHUNKS: the seven policies evicting inside the model at a quarter of the length
    local L=$1 d=$OUT/inmodel/niah-$1
    if [ "$RESUME" = 1 ] && [ -f "$d/answer.csv" ]; then return; fi
    prompts_for niah "$L" "$OUT/inmodel/niah-$L.jsonl"
    "$KV" fidelity --model "$MODEL" --prompts "$OUT/inmodel/niah-$L.jsonl" --policies "$POLICIES" \
        --budgets $((L / 4)) --chunks "$2" --quiet --force -o "$d"
    find "$d" -name full.h5 -delete
}

inmodel_piece() {
    mkdir -p "$OUT/inmodel"
    inmodel_cell 1024 128,512,1024
    inmodel_cell 2048 128
}

budgets_piece() {
    mkdir -p "$OUT/budgets"
    local L=1024 d=$OUT/budgets/niah-1024
    prompts_for niah "$L" "$OUT/budgets/niah-$L.jsonl"
    if ! { [ "$RESUME" = 1 ] && [ -f "$d-uniform/answer.csv" ]; }; then
        "$KV" fidelity --model "$MODEL" --prompts "$OUT/budgets/niah-$L.jsonl" --policies "$POLICIES" \
            --budgets $((L / 10)),$((L / 2)) --chunk 128 --quiet --force -o "$d-uniform"
    fi
    if ! { [ "$RESUME" = 1 ] && [ -f "$d-adakv/answer.csv" ]; }; then
        "$KV" fidelity --model "$MODEL" --prompts "$OUT/budgets/niah-$L.jsonl" --policies snapkv \
            --allocators adakv --budgets $((L / 10)),$((L / 4)),$((L / 2)) --chunk 128 --quiet --force -o "$d-adakv"
    fi
    find "$OUT/budgets" -name full.h5 -delete
}

peers_cell() { # LENGTH SEEDS PRESSES RATIOS: one cell of the peers piece (skipped under --resume once done)
    local d=$OUT/peers/niah-$1
    if [ "$RESUME" = 1 ] && [ -f "$d/peer_kvpress_summary.csv" ]; then return; fi
    mkdir -p "$d"
    "$KV" prompts niah --model "$REAL_MODEL" --chat --lengths "$1" --depths 0,0.25,0.5,0.75,1 --seeds "$2" \
        --force -o "$OUT/peers/niah-$1.jsonl"
    "$REAL_PY" "$ROOT/bench/peer_kvpress_pipeline.py" --kvtrace "$KV" --model "$REAL_MODEL" \
        --prompts "$OUT/peers/niah-$1.jsonl" --presses "$3" --ratios "$4" --chunked 128 -o "$d" > "$d/log.txt"
}

peers_piece() {
    LOG=$(mktemp -d)
    . "$ROOT/tests/lib/real_setup.sh"
    if ! real_setup "${BUILD:-build}"; then
        echo "findings: peers: $REAL_WHY" >&2
        return 1
    fi
    peers_cell 1024 0,1,2,3,4,5,6,7,8,9 keydiff,snapkv,tova,streaming,expected_attention 0.75
    rm -rf "$LOG"
}

for p in "${PIECES[@]}"; do   # under --resume each piece skips the cells it has finished
    mkdir -p "$OUT/$p"
    timed "$p" "${p}_piece"
done
