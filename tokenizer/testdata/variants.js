// The pre-tokenizer variants of tokenizer.json that encode.js checks:
// GPT-2's (ByteLevel with its own regex) and Llama 3's (Split with digits in
// threes). tokenizer_test.go builds the same.
'use strict';
module.exports = {
  gpt2: (t) => { t.pre_tokenizer = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true }; return t; },
  llama3: (t) => {
    t.pre_tokenizer.pretokenizers[0].pattern.Regex = t.pre_tokenizer.pretokenizers[0].pattern.Regex.replace('\\p{N}|', '\\p{N}{1,3}|');
    return t;
  },
};
