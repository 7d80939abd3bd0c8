"""Writes tokenizer.json: a small byte-level BPE tokenizer laid out as the
Hugging Face tokenizers library writes one (the layout of Qwen2's: a Split
pre-tokenizer with its regex, then ByteLevel without its own regex; the
ByteLevel decoder), trained here by plain pair counting over a fixed text so
that the file is small and deterministic. Its special tokens are ChatML's.
A TemplateProcessing post-processor adds <|endoftext|> in front when special
tokens are asked for (completions do, chat prompts do not), so that the
tests cover both. Run: python3 make_tokenizer.py (no dependencies)."""
import json, re

# GPT-2's byte-to-unicode table (tokenizers' ByteLevel alphabet).
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))

B2U = bytes_to_unicode()
TEXT = open(__file__.replace("make_tokenizer.py", "corpus.txt"), encoding="utf-8").read()
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = 600

# Words for training: runs of letters with an optional leading space, digits, other.
words = {}
for w in re.findall(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+", TEXT):
    u = tuple(B2U[b] for b in w.encode("utf-8"))
    words[u] = words.get(u, 0) + 1

vocab = {}
for s in SPECIAL:
    vocab[s] = len(vocab)
base = len(vocab)
for b in range(256):
    vocab[B2U[b]] = base + b
merges = []
for _ in range(MERGES):
    pairs = {}
    for w, c in words.items():
        for a, b in zip(w, w[1:]):
            pairs[(a, b)] = pairs.get((a, b), 0) + c
    if not pairs:
        break
    best = max(sorted(pairs), key=lambda p: pairs[p])  # ties: the first in sorted order
    if pairs[best] < 2:
        break
    merges.append(best)
    vocab[best[0] + best[1]] = len(vocab)
    out = {}
    for w, c in words.items():
        nw, i = [], 0
        while i < len(w):
            if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                nw.append(w[i] + w[i + 1]); i += 2
            else:
                nw.append(w[i]); i += 1
        out[tuple(nw)] = out.get(tuple(nw), 0) + c
    words = out

split = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
tok = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [
        {"id": vocab[s], "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
        for s in SPECIAL
    ],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": split}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    ]},
    "post_processor": {"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [vocab["<|endoftext|>"]], "tokens": ["<|endoftext|>"]}}},
    "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
              "vocab": vocab, "merges": [[a, b] for a, b in merges]},
}
with open(__file__.replace("make_tokenizer.py", "tokenizer.json"), "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(len(vocab), "tokens,", len(merges), "merges")
