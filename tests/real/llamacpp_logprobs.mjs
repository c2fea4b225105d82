// llama.cpp's side of tests/real/test_smollm2_llamacpp.py, through node-llama-cpp's prebuilt CPU binaries:
// the next-token log-probability of every prompt token given those before it (teacher forced, the full
// distribution: no top-k, top-p or min-p), and the greedy continuation of GEN tokens. float32 KV cache,
// no flash attention, one thread. With TEXTS set instead: llama.cpp's token ids of each text.
//   MODEL=... IDS=... OUT=... GEN=N node DIR/llamacpp_logprobs.mjs   (a copy in DIR, the folder holding
//   node_modules/node-llama-cpp, where its bare imports resolve)
import {getLlama} from "node-llama-cpp";
import fs from "node:fs";
const {MODEL: model, IDS: idsFile, OUT: outFile, GEN: genN, TEXTS: textsFile} = process.env;
if (textsFile) { // TEXTS: a JSON array of strings; OUT gets llama.cpp's ids of each (no BOS, special tokens matched)
    const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
    const m = await llama.loadModel({modelPath: model, vocabOnly: true});
    const texts = JSON.parse(fs.readFileSync(textsFile, "utf8"));
    fs.writeFileSync(outFile, JSON.stringify(texts.map(t => Array.from(m.tokenize(t, true)))));
    process.exit(0);
}
const ids = JSON.parse(fs.readFileSync(idsFile, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const m = await llama.loadModel({modelPath: model});
const ctx = await m.createContext({contextSize: Math.max(512, ids.length + 80), batchSize: 128, flashAttention: false,
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32", threads: 1, sequences: 1});
const seq = ctx.getSequence();
const res = await seq.controlledEvaluate(ids.map(t => [t, {generateNext: {probabilities: true, options: {temperature: 1, topK: 0, topP: 1, minP: 0}}}]));
const out = {logp_next: [], top: []};
for (let i = 0; i < ids.length - 1; i++) {
    const p = res[i].next.probabilities;
    out.logp_next.push(Math.log(p.get(ids[i + 1]) ?? 0));
    let best = -1, bp = -1; for (const [t, v] of p) if (v > bp) { bp = v; best = t; }
    out.top.push(best);
}
// greedy continuation
const gen = [];
let last = res[ids.length - 1].next.probabilities; let tok = -1, bp = -1; for (const [t, v] of last) if (v > bp) { bp = v; tok = t; }
for (let k = 0; k < Number(genN || 0); k++) {
    gen.push(tok);
    const r = await seq.controlledEvaluate([[tok, {generateNext: {probabilities: true, options: {temperature: 1, topK: 0, topP: 1, minP: 0}}}]]);
    const p = r[0].next.probabilities; bp = -1; for (const [t, v] of p) if (v > bp) { bp = v; tok = t; }
}
out.greedy = gen;
fs.writeFileSync(outFile, JSON.stringify(out));
process.exit(0);
