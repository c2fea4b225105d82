"""SmolLM2's tokenizer as Hugging Face `tokenizers` builds it from the GGUF's vocabulary and merges with SmolLM2's
own pre-tokenizer, Sequence[Digits(individual_digits=True), ByteLevel] (llama.cpp's `smollm` split), the GGUF's
control tokens special: the reference of test_smollm2_tokenizer.py and test_chat_templates.py."""
import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers


def gguf_chat_template(path):
    """The GGUF's tokenizer.chat_template, as the gguf package reads it."""
    f = gguf.GGUFReader(path).fields["tokenizer.chat_template"]
    return bytes(f.parts[f.data[0]]).decode("utf-8")


def hf_reference(path):
    """tokenizers' BPE over the GGUF's vocabulary and merges, SmolLM2's pre-tokenizer and decoder."""
    r = gguf.GGUFReader(path)
    f = r.fields
    toks = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode("utf-8") for i in f["tokenizer.ggml.tokens"].data]
    merges = [bytes(f["tokenizer.ggml.merges"].parts[i]).decode("utf-8") for i in f["tokenizer.ggml.merges"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    vocab = {t: i for i, t in enumerate(toks)}
    bpe = models.BPE(vocab, [tuple(m.split(" ", 1)) for m in merges], ignore_merges=False)
    tk = Tokenizer(bpe)
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                               pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(toks, types) if ty == 3])
    return tk
