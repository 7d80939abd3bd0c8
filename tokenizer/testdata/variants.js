// The variants of tokenizer.json that encode.js checks: GPT-2's pre-tokenizer
// (ByteLevel with its own regex), Llama 3's (Split with digits in threes),
// and Llama 3's file layout (its split, the model's ignore_merges, a
// Sequence post-processor of ByteLevel and TemplateProcessing), with two
// words in the vocabulary whole that the merges do not make, so that
// ignore_merges changes their ids. tokenizer_test.go builds the same.
'use strict';
const llama3Split = (t) => {
  t.pre_tokenizer.pretokenizers[0].pattern.Regex = t.pre_tokenizer.pretokenizers[0].pattern.Regex.replace('\\p{N}|', '\\p{N}{1,3}|');
  return t;
};
module.exports = {
  gpt2: (t) => { t.pre_tokenizer = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true }; return t; },
  llama3: llama3Split,
  llama3file: (t) => {
    llama3Split(t);
    t.model.ignore_merges = true;
    let next = Math.max(...Object.values(t.model.vocab), ...t.added_tokens.map((a) => a.id)) + 1;
    for (const w of ['\u0120backlog', '\u0120tenants']) t.model.vocab[w] = next++;
    t.post_processor = { type: 'Sequence', processors: [
      { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true }, t.post_processor] };
    return t;
  },
};
