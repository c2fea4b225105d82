// llama.cpp peer for `make bench`: prompt-evaluation rate of llama.cpp (the prebuilt CPU
// binaries of the npm package node-llama-cpp 3.21.1, installed by make bench-deps
// into build/llamacpp-3.21.1) on the same GGUF file and token ids kvtrace captures from.
//
// usage: node bench/peer_llamacpp.mjs --model FILE.gguf --tokens TOKFILE --threads N
//            [--batch B] [--reps R] [--flash-attn auto|on|off] [--mmap auto|on|off]
//            [--dump-probs OUT.json] [--node-modules DIR]
//
// TOKFILE: token ids separated by spaces/commas/newlines. The model is loaded on the CPU
// (gpu:false, build:"never": the prebuilt binary only), a context of >= T tokens is made
// with N threads and an F32 KV cache (keys and values), batch B (default: the whole prompt),
// and the ids are evaluated as a prompt without generating. Only the evaluation is timed
// (model load and context creation excluded); with --reps R the best of R evaluations,
// each on a fresh context. Prints one line on stdout:
//   peer-llamacpp: tokens T seconds S tokens_per_s R blas BACKEND
// --dump-probs: after the timing, evaluates the prompt once more and writes the next-token
// probability distribution of the last position as JSON {"token_id": p, ...} (untimed).
// Peak RSS is measured by the caller (/usr/bin/time -f %M).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

function die(msg) {
    process.stderr.write(`peer-llamacpp: ${msg}\n`);
    process.exit(1);
}

function parseArgs(argv) {
    const a = { model: null, tokens: null, threads: null, batch: 0, reps: 1,
                flashAttn: "auto", mmap: "auto", dumpProbs: null, nodeModules: null };
    const need = (i) => { if (i + 1 >= argv.length) die(`${argv[i]} needs a value`); return argv[i + 1]; };
    const posInt = (flag, s, min) => {
        if (!/^\d+$/.test(s) || Number(s) < min) die(`${flag} wants an integer >= ${min}, got "${s}"`);
        return Number(s);
    };
    for (let i = 0; i < argv.length; i++) {
        const f = argv[i];
        switch (f) {
            case "--model": a.model = need(i); i++; break;
            case "--tokens": a.tokens = need(i); i++; break;
            case "--threads": a.threads = posInt(f, need(i), 1); i++; break;
            case "--batch": a.batch = posInt(f, need(i), 1); i++; break;
            case "--reps": a.reps = posInt(f, need(i), 1); i++; break;
            case "--flash-attn": a.flashAttn = need(i); i++; break;
            case "--mmap": a.mmap = need(i); i++; break;
            case "--dump-probs": a.dumpProbs = need(i); i++; break;
            case "--node-modules": a.nodeModules = need(i); i++; break;
            case "-h": case "--help":
                process.stdout.write("usage: node bench/peer_llamacpp.mjs --model FILE.gguf --tokens TOKFILE --threads N " +
                    "[--batch B] [--reps R] [--flash-attn auto|on|off] [--mmap auto|on|off] [--dump-probs OUT.json] " +
                    "[--node-modules DIR]\n");
                process.exit(0);
            default: die(`unknown argument "${f}" (see --help)`);
        }
    }
    if (!a.model) die("--model FILE.gguf is required");
    if (!a.tokens) die("--tokens TOKFILE is required");
    if (a.threads == null) die("--threads N is required");
    const tri = (flag, v) => {
        if (v === "auto") return "auto";
        if (v === "on") return true;
        if (v === "off") return false;
        die(`${flag} wants auto, on or off, got "${v}"`);
    };
    a.flashAttn = tri("--flash-attn", a.flashAttn);
    a.mmap = tri("--mmap", a.mmap);
    return a;
}

function readTokens(file) {
    let text;
    try { text = fs.readFileSync(file, "utf8"); } catch (e) { die(`cannot read --tokens ${file}: ${e.code ?? e.message}`); }
    const parts = text.replace(/[\[\],]/g, " ").split(/\s+/).filter((s) => s.length > 0);
    const ids = parts.map((s) => {
        if (!/^\d+$/.test(s)) die(`${file}: "${s}" is not a token id`);
        return Number(s);
    });
    if (ids.length === 0) die(`${file}: no token ids`);
    return ids;
}

// node-llama-cpp lives in BUILD/llamacpp-3.21.1/node_modules (tests/lib/real_setup.sh), not next to this script.
async function importNodeLlamaCpp(dirOpt) {
    const here = path.dirname(fileURLToPath(import.meta.url));
    const cands = [];
    if (dirOpt) cands.push(dirOpt);
    if (process.env.KVTRACE_BENCH_NODE_MODULES) cands.push(process.env.KVTRACE_BENCH_NODE_MODULES);
    cands.push(path.join(here, "..", "build", "llamacpp-3.21.1", "node_modules"));
    for (const nm of cands) {
        const pj = path.join(nm, "node-llama-cpp", "package.json");
        if (!fs.existsSync(pj)) continue;
        const meta = JSON.parse(fs.readFileSync(pj, "utf8"));
        const entry = path.join(nm, "node-llama-cpp", "dist", "index.js");
        return { mod: await import(pathToFileURL(entry).href), version: meta.version, nm };
    }
    die(`node-llama-cpp not found (looked in ${cands.join(", ")}); run make bench-deps first`);
}

function backendName(logs, systemInfo) {
    // llama.cpp logs which CPU backend variant it loaded ("libggml-cpu-haswell.so"); the
    // system info line says "CPU : SSE3 = 1 | ... | BLAS = 1 |" when a BLAS backend is in.
    let name = "ggml-cpu";
    for (const m of logs) {
        const r = /libggml-cpu-([A-Za-z0-9_]+)\.so/.exec(m);
        if (r) { name = `ggml-cpu-${r[1]}`; break; }
    }
    if (/\bBLAS\s*=\s*1/.test(systemInfo ?? "")) name += "+blas";
    return name.replace(/\s+/g, "");
}

async function main() {
    const args = parseArgs(process.argv.slice(2));
    const tokens = readTokens(args.tokens);
    const T = tokens.length;
    if (!fs.existsSync(args.model)) die(`model ${args.model} not found`);
    const { mod, version } = await importNodeLlamaCpp(args.nodeModules);
    if (version !== "3.21.1") process.stderr.write(`peer-llamacpp: warning: node-llama-cpp ${version}, not 3.21.1\n`);
    const { getLlama, LlamaLogLevel } = mod;

    const logs = [];
    let llama;
    try {
        llama = await getLlama({
            gpu: false,
            build: "never",
            usePrebuiltBinaries: true,
            skipDownload: true,
            progressLogs: false,
            maxThreads: args.threads,
            logLevel: LlamaLogLevel.debug,
            logger: (level, message) => {
                logs.push(String(message));
                if (process.env.PEER_DEBUG === "2") process.stderr.write(`[${level}] ${String(message).trimEnd()}\n`);
                if (level === LlamaLogLevel.error || level === LlamaLogLevel.fatal)
                    process.stderr.write(`llama.cpp: ${String(message).trimEnd()}\n`);
            },
        });
    } catch (e) {
        die(`no usable prebuilt llama.cpp CPU binary (node-llama-cpp ${version}, @node-llama-cpp/linux-x64): ` +
            `${String(e?.message ?? e).split("\n")[0]}; run make bench-deps`);
    }
    if (llama.gpu !== false) die(`getLlama gave a ${llama.gpu} build, not the CPU one`);
    if (llama.buildType !== "prebuilt") die(`getLlama gave a ${llama.buildType} binary, not the prebuilt one`);

    let model;
    try {
        model = await llama.loadModel({ modelPath: path.resolve(args.model), gpuLayers: 0, useMmap: args.mmap });
    } catch (e) {
        die(`llama.cpp cannot load ${args.model}: ${String(e?.message ?? e).split("\n")[0]}`);
    }
    const nVocab = model.tokenizer ? model.fileInsights?.vocabularySize ?? null : null;
    if (nVocab != null) {
        const bad = tokens.find((t) => t >= nVocab);
        if (bad != null) die(`token id ${bad} is outside the vocabulary (${nVocab})`);
    }

    const batch = args.batch > 0 ? args.batch : T;
    const ctxOptions = {
        contextSize: T + 1, // a full context would make node-llama-cpp shift it
        batchSize: Math.min(batch, T),
        sequences: 1,
        threads: { ideal: args.threads, min: args.threads },
        flashAttention: args.flashAttn,
        experimentalKvCacheKeyType: "F32",
        experimentalKvCacheValueType: "F32",
        ignoreMemorySafetyChecks: true,
        failedCreationRemedy: false,
    };
    const newContext = async () => {
        let ctx;
        try { ctx = await model.createContext(ctxOptions); } catch (e) {
            die(`llama.cpp cannot create a context (size ${T}, batch ${ctxOptions.batchSize}, F32 KV): ` +
                `${String(e?.message ?? e).split("\n")[0]}`);
        }
        if (process.env.PEER_DEBUG) process.stderr.write(`context ${ctx.contextSize} batch ${ctx.batchSize} kv ${ctx.kvCacheKeyType}/${ctx.kvCacheValueType} fa ${ctx.flashAttention}\n`);
        if (ctx.contextSize < T) die(`context size ${ctx.contextSize} < ${T}`);
        return ctx;
    };

    let best = Infinity;
    for (let r = 0; r < args.reps; r++) {
        const ctx = await newContext();
        const seq = ctx.getSequence();
        const t0 = process.hrtime.bigint();
        await seq.evaluateWithoutGeneratingNewTokens(tokens);
        const t1 = process.hrtime.bigint();
        if (seq.nextTokenIndex !== T) die(`evaluated ${seq.nextTokenIndex} of ${T} tokens`);
        const s = Number(t1 - t0) / 1e9;
        if (s < best) best = s;
        if (process.env.PEER_DEBUG) process.stderr.write(`rep ${r}: ${s.toFixed(4)} s\n`);
        if (r === 0 && (ctx.kvCacheKeyType !== undefined) &&
            (String(ctx.kvCacheKeyType) !== "0" || String(ctx.kvCacheValueType) !== "0"))
            process.stderr.write(`peer-llamacpp: warning: KV cache types ${ctx.kvCacheKeyType}/${ctx.kvCacheValueType}, not F32\n`);
        await ctx.dispose();
    }

    if (args.dumpProbs) {
        const ctx = await newContext();
        const seq = ctx.getSequence();
        // the first output of evaluateWithMetadata is the next token after the whole prompt
        const it = seq.evaluateWithMetadata(tokens, { probabilities: true }, { temperature: 0 });
        const first = await it.next();
        const probs = {};
        for (const [tok, p] of first.value.probabilities) probs[tok] = p;
        await it.return();
        fs.writeFileSync(args.dumpProbs, JSON.stringify(probs));
        await ctx.dispose();
    }

    const backend = backendName(logs, llama.systemInfo);
    process.stdout.write(`peer-llamacpp: tokens ${T} seconds ${best.toFixed(4)} tokens_per_s ${(T / best).toFixed(2)} ` +
        `blas ${backend}\n`);
    await model.dispose();
    await llama.dispose();
}

main().catch((e) => die(String(e?.stack ?? e).split("\n")[0]));
