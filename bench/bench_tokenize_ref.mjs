// make bench (tokenizer), the reference side: encodes one text file with a reference
// encoder, add_special_tokens false, and reports the time of encode() alone.
//   node bench/bench_tokenize_ref.mjs ENCODER ENC_DIR TOK_DIR TEXT OUT_IDS
// ENCODER: ref_hf (@huggingface/tokenizers, ENC_DIR/tokenizers.mjs) or ref_lenml
// (@lenml/tokenizers, ENC_DIR/main.mjs); TOK_DIR holds tokenizer.json and
// tokenizer_config.json (tests/lib/fetch_tokenizers.sh). Writes the ids to OUT_IDS as
// one JSON array and prints one line: "load_s S encode_s S tokens N".
// Loaded as tests/tokenizers/make_fixtures.mjs loads them.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

async function main() {
  const [encoder, encDir, tokDir, textPath, outPath] = process.argv.slice(2);
  const text = fs.readFileSync(textPath, "utf8");
  const t0 = process.hrtime.bigint();
  const tj = JSON.parse(fs.readFileSync(path.join(tokDir, "tokenizer.json"), "utf8"));
  const tc = JSON.parse(fs.readFileSync(path.join(tokDir, "tokenizer_config.json"), "utf8"));
  let encode;
  if (encoder === "ref_hf") {
    const { Tokenizer } = await import(pathToFileURL(path.join(encDir, "tokenizers.mjs")).href);
    const tok = new Tokenizer(tj, tc);
    encode = (s) => tok.encode(s, { add_special_tokens: false }).ids;
  } else if (encoder === "ref_lenml") {
    const Lenml = await import(pathToFileURL(path.join(encDir, "main.mjs")).href);
    const tok = Lenml.TokenizerLoader.fromPreTrained({ tokenizerJSON: tj, tokenizerConfig: tc });
    encode = (s) => tok.encode(s, { add_special_tokens: false });
  } else {
    throw new Error(`unknown encoder ${encoder} (ref_hf or ref_lenml)`);
  }
  const t1 = process.hrtime.bigint();
  const ids = encode(text);
  const t2 = process.hrtime.bigint();
  fs.writeFileSync(outPath, JSON.stringify(Array.from(ids)));
  const s = (a, b) => (Number(b - a) / 1e9).toFixed(3);
  console.log(`load_s ${s(t0, t1)} encode_s ${s(t1, t2)} tokens ${ids.length}`);
}

main().catch((e) => {
  console.error("bench_tokenize_ref: error: " + (e && e.message ? e.message : e));
  process.exit(1);
});
