#!/usr/bin/env python3
"""The tokenizer test corpus: a deterministic list of strings (no randomness from
the machine: a fixed-seed generator of our own), and a separate list of invalid
UTF-8 byte strings that `kvtrace tokenize` must refuse (exit 3, naming the offset).

    python3 tests/tokenizers/corpus.py OUT.json

writes {"strings": [...], "invalid_utf8": [{"hex": ..., "offset": ...}, ...]}.
Only the standard library is used, so any python3 runs it; make_fixtures.mjs
calls it and keeps its output inside the fixtures."""
import json
import sys

SEED = 1616


class Rng:
    """xorshift64*: the same sequence on every machine and Python version."""

    def __init__(self, seed):
        self.s = seed or 1

    def next(self):
        s = self.s
        s ^= (s >> 12)
        s ^= (s << 25) & 0xFFFFFFFFFFFFFFFF
        s ^= (s >> 27)
        self.s = s & 0xFFFFFFFFFFFFFFFF
        return (self.s * 0x2545F4914F6CDD1D) & 0xFFFFFFFFFFFFFFFF

    def below(self, n):
        return self.next() % n

    def pick(self, seq):
        return seq[self.below(len(seq))]


PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, there was a little girl named Lily who loved to play outside.",
    "Key-value caches grow linearly with the context length; eviction keeps them bounded.",
    "In 1969, Neil Armstrong became the first person to walk on the Moon.",
    "She said, \"I don't know what you're talking about,\" and left the room.",
    "Attention is all you need -- or is it? Researchers aren't so sure anymore.",
    "The U.S.A. and the U.K. signed the treaty on Jan. 3rd, 2024 at 10:45 a.m.",
    "Mr. O'Neil's dog wasn't barking; it'd been asleep since we'd arrived.",
    "Prices rose 3.5% year-over-year, while wages grew only 2.1%.",
    "E-mail me at someone@example.com or visit https://example.org/path?q=1&r=2#frag.",
    "HELLO WORLD! THIS IS ALL CAPS. tHiS iS mIxEd CaSe.",
    "We'll see; they've gone, I'm here, you're there, he'll stay, it's late.",
    "Tokenization splits text into pieces; byte-level BPE never fails on unknown characters.",
    "The mitochondria is the powerhouse of the cell.",
    "A list: apples, oranges, pears... and (of course) bananas!",
]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D",
                "n't", "’s", "’ll", "’re"]
CODE = [
    "def f(x):\n    return x * 2\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (size_t i = 0; i < n; ++i) { a[i] += b[i]; }",
    "const x = await fetch(`/api/${id}`).then(r => r.json());",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
    "if x != None and y == 3:\n        pass\n    else:\n        raise ValueError('bad')\n",
    "<div class=\"box\"><p>Hello&nbsp;world</p></div>",
    "{\"key\": [1, 2.5, -3e10, null, true], \"nested\": {\"a\": \"b\"}}",
    "x <<= 2; y >>= 3; z &&= w || !v; a ?? b;",
    "fn main() { let v: Vec<u8> = vec![0; 16]; println!(\"{:?}\", v); }",
    "$ git commit -m 'fix: off-by-one' && make -j2 test 2>&1 | tail -n 3",
    "    \n\t\t  indented\r\n\r\n",
    "lambda_1 = lambda a,b:a**b//c%d^e",
    "// TODO(kv): remove this hack\n/* block\n   comment */",
]
ACCENTED = ["café", "naïve", "résumé", "Ångström", "São Paulo", "Zürich", "Dvořák", "Łódź", "crème brûlée",
            "façade", "Ñandú", "smørrebrød", "İstanbul", "ǅemal", "ﬁnance", "Ærø"]
# NFC-relevant: decomposed forms (e + combining acute), which Qwen's NFC normaliser composes
DECOMPOSED = ["cafe\u0301", "e\u0301te\u0301", "A\u030angstro\u0308m", "n\u0303", "\u1100\u1161\u11a8",
              "Cafe\u0301 au lait", "o\u0308\u0304", "\u212b", "\u2126"]
CJK = ["你好，世界！", "我爱自然语言处理。", "東京都は日本の首都です。", "ひらがなとカタカナ", "한국어 텍스트입니다",
       "汉字和English混合", "「引用」と『二重』", "中华人民共和国成立于1949年10月1日", "ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ",
       "数字１２３４５", "𠀀𠀁𪚥"]
ARABIC = ["مرحبا بالعالم", "اللغة العربية جميلة", "١٢٣٤٥٦٧٨٩٠", "السلام عليكم ورحمة الله", "كتاب‌ها",
          "עברית גם כן", "Русский текст, ёлки-палки!", "Ελληνικά γράμματα", "हिन्दी भाषा", "ภาษาไทย"]
EMOJI = ["👍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "👩🏿‍💻", "🇺🇸🇯🇵", "❤️", "🤷‍♂️", "🧑🏻‍🤝‍🧑🏾", "😀😃😄😁",
         "1️⃣", "🫠", "©®™", "☕️", "⚠️"]
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
           "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<unk>", "<pad>", "<|fim_prefix|>",
           "<think>", "</think>", "<|reserved_special_token_0|>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
           "<|begin_of_text", "|im_start|>", "< |im_start| >", "<|IM_START|>", "<<|im_start|>>",
           "<|endoftext|><|endoftext|>", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"]
WS = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\t\t", "    ", "\u00a0", "\u3000", "\u2009",
      "\v", "\f", "\u2028", "\u200b"]
WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which but have an "
         "they you were her she there been one all we their has would when if so no will more can out about "
         "kv cache eviction attention token model layer head query key value sparse dense memory").split()


def numbers(rng):
    out = []
    for n in range(1, 41):  # every length 1..40 digits
        out.append("".join(str(rng.below(10)) for _ in range(n)))
        out.append("x" + out[-1] + "y")
        out.append(" " + out[-2])
    out += ["0", "00", "000", "0000", "-1", "+1", "3.14159", "1e-10", "1,000,000", "1.000.000,00", "0x1F",
            "0b1011", "2024-06-01", "12:34:56", "$19.99", "€5", "50%", "1/2", "½", "²³", "Ⅻ", "٣"]
    return out


def long_words(rng):
    out = []
    for n in (64, 128, 256, 512, 1024, 2048):
        out.append("a" * n)
        out.append("".join(rng.pick("abcdefghijklmnopqrstuvwxyz") for _ in range(n)))
        out.append("ab" * (n // 2))
    out.append("Pneumonoultramicroscopicsilicovolcanoconiosis")
    out.append("Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft")
    out.append("https://example.com/" + "x" * 300)
    out.append("\u00e9" * 500)
    out.append("你" * 300)
    out.append("😀" * 200)
    out.append(" " * 1000)
    out.append("\n" * 300)
    out.append("!" * 400)
    return out


def mixed(rng, pools, count):
    out = []
    for _ in range(count):
        parts = []
        for _ in range(1 + rng.below(8)):
            pool = rng.pick(pools)
            parts.append(rng.pick(pool))
            parts.append(rng.pick(WS) if rng.below(3) == 0 else " ")
        s = "".join(parts)
        out.append(s if rng.below(2) else s.strip(" "))
    return out


def strings():
    rng = Rng(SEED)
    out = []
    out += PROSE + CODE + ACCENTED + DECOMPOSED + CJK + ARABIC + EMOJI + SPECIAL + WS
    out += [w + c for w in ("it", "we", "they", "I", "you", "don", "IT", "John") for c in CONTRACTIONS]
    out += numbers(rng)
    out += long_words(rng)
    ws_runs = []
    for w in WS:
        for n in (1, 2, 3, 5, 8):
            ws_runs += ["a" + w * n + "b", w * n + "x", "x" + w * n, w * n]
    out += ws_runs
    for s in SPECIAL:  # look-alikes inside text
        out += ["Hello " + s + " world", s + "text", "text" + s, " " + s + " "]
    pools = [PROSE, CODE, ACCENTED, DECOMPOSED, CJK, ARABIC, EMOJI, SPECIAL, WORDS, numbers(Rng(7)), CONTRACTIONS]
    out += mixed(rng, pools, 900)
    out += [" ".join(rng.pick(WORDS) for _ in range(1 + rng.below(40))) for _ in range(400)]
    out += ["".join(random_char(rng) for _ in range(1 + rng.below(12))) for _ in range(300)]
    out = [s for s in dict.fromkeys(out) if s]  # unique, in order, no empty string
    return out


# (first code point, count) ranges for random characters; no surrogates
RANGES = [(0x20, 0x5f), (0xa0, 0x160), (0x370, 0x90), (0x400, 0x100), (0x600, 0x100), (0x900, 0x80),
          (0x3040, 0xc0), (0x4e00, 0x5200), (0xac00, 0x2ba4), (0x1f300, 0x300), (0x2000, 0x70), (0x1d400, 0x300)]


def random_char(rng):
    first, count = rng.pick(RANGES)
    return chr(first + rng.below(count))


def invalid_utf8():
    """(bytes, offset of the first invalid byte) pairs."""
    cases = [
        (b"\x80", 0), (b"abc\xff", 3), (b"\xc0\xaf", 0), (b"\xe0\x80\xaf", 0), (b"\xed\xa0\x80", 0),
        (b"caf\xc3", 3), (b"caf\xc3(", 3), (b"\xf4\x90\x80\x80", 0), (b"\xf5\x80\x80\x80", 0),
        (b"ok \xe2\x82", 3), (b"\xfe\xff", 0), (b"hello\x00\xff", 6), (b"\xf0\x9f\x98", 0),
        (b"\xf0\x9f\x98\x80\x80", 4), (b"a\xc2", 1), (b"\xc1\xbf", 0), (b"x" * 1000 + b"\xa0", 1000),
        ("你好".encode() + b"\xe4\xbd", 6), (b"\xed\xbf\xbf", 0), (b"<|im_start|>\xff", 12),
    ]
    return [{"hex": b.hex(), "offset": o} for b, o in cases]


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: corpus.py OUT.json\n")
        return 2
    doc = {"seed": SEED, "strings": strings(), "invalid_utf8": invalid_utf8()}
    with open(argv[1], "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    sys.stderr.write("corpus.py: %d strings, %d invalid UTF-8 cases\n" % (len(doc["strings"]),
                                                                          len(doc["invalid_utf8"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
