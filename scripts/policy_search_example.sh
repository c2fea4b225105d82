#!/bin/sh
# The worked example of docs/policy-search.md#worked-example-scriptspolicy_search_examplesh: on the default model, a needle study of
# 24 prompts; features on every prompt (the cache driven by the oracle); a fit on half the prompts
# (seeded split by prompt) and the held-out sim on the other half against the baselines.
#   scripts/policy_search_example.sh [OUT]     (default out/policy-search; replaced when it exists)
# Each step is one kvtrace command; the numbers are in OUT/fit/heldout.md and, after one on-policy
# round, OUT/fit2/heldout.md.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/out/policy-search}
KV=${KVTRACE:-$ROOT/build/kvtrace}
if [ -z "${KVTRACE_MODEL_DIR:-}" ] && [ -d "$ROOT/../shared/models" ]; then
    KVTRACE_MODEL_DIR=$(cd "$ROOT/../shared/models" && pwd)
    export KVTRACE_MODEL_DIR
fi
rm -rf "$OUT"
mkdir -p "$OUT"
cd "$OUT"
cat > haystack.txt <<'TXT'
Once upon a time, there was a little girl named Lily. She loved to play outside in the park.
One day, she saw a big red ball under a tree. She ran to the ball and kicked it very high.
Her friend Tom came to play too. They played with the ball all day and laughed a lot.
When the sun went down, Lily went home. Her mom gave her a warm bowl of soup.
Lily was happy. She went to bed and dreamed about the big red ball and her friend Tom.
TXT
# 1. 24 prompts: 4 lengths x 6 depths
"$KV" prompts needle --haystack haystack.txt --needle "The secret code is 4721." \
    --question "What is the secret code?" --answer 4721 \
    --depths 0,0.2,0.4,0.6,0.8,1 --lengths 160,200,240,256 -o prompts.jsonl
# 2. one trace per prompt
"$KV" capture --prompts prompts.jsonl --chunk 16 --quiet -o study
# 3. features and targets at every eviction step, the cache driven by the oracle, N = 32
"$KV" features study --policy oracle --budget 32 --chunk 16 -o features.h5
# 4. fit (ranking objective) on half the prompts, held-out sim on the other half at two budgets
"$KV" fit features.h5 --objective rank --seed 1 --study study --split 0.5 --split-seed 23 \
    --budgets 32,64 --chunk 16 -o fit
cat fit/heldout.md
# 5. one on-policy round: features again with the cache driven by the fitted policy itself (the
#    candidates it will really face), the same split, fitted again as `fitted2`
"$KV" features study --policy fitted --defines fit/policy.defines --budget 32 --chunk 16 -o features2.h5
"$KV" fit features2.h5 --objective rank --seed 1 --study study --split 0.5 --split-seed 23 --name fitted2 \
    --budgets 32,64 --chunk 16 -o fit2
cat fit2/heldout.md
