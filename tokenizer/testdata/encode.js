// Encodes rendered.json with the Hugging Face tokenizers library (the npm
// package "tokenizers": the same Rust code as the Python package that vLLM and
// SGLang tokenize with) and writes vectors.json: each chat prompt without
// special tokens (as vLLM encodes a rendered chat prompt), each completion
// prompt with them (as vLLM encodes a completion prompt).
// Run: npm ci && node encode.js (after python3 render.py).
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');
(async () => {
  const tok = Tokenizer.fromFile('tokenizer.json');
  const r = JSON.parse(fs.readFileSync('rendered.json', 'utf8'));
  const out = { generator: 'encode.js with tokenizers ' + require('tokenizers/package.json').version, chats: [], prompts: [] };
  for (const c of r.chats) {
    const e = await tok.encode(c.text, null, { addSpecialTokens: false });
    out.chats.push({ name: c.name, messages: c.messages, text: c.text, ids: e.getIds() });
  }
  // The same vocabulary with the other known pre-tokenizers (variants.js
  // and the Go test build them alike), so that each split pattern is checked.
  const variants = require('./variants.js');
  const base = fs.readFileSync('tokenizer.json', 'utf8');
  const others = {};
  for (const [name, f] of Object.entries(variants)) others[name] = Tokenizer.fromString(JSON.stringify(f(JSON.parse(base))));
  for (const p of r.prompts) {
    const e = await tok.encode(p.prompt, null, { addSpecialTokens: true });
    const v = {};
    for (const [name, t] of Object.entries(others)) v[name] = (await t.encode(p.prompt, null, { addSpecialTokens: true })).getIds();
    out.prompts.push({ name: p.name, prompt: p.prompt, ids: e.getIds(), variants: v });
  }
  // One case a line, so that a change shows as the lines of its cases.
  const lines = (xs) => xs.map((x) => '  ' + JSON.stringify(x)).join(',\n');
  fs.writeFileSync('vectors.json', '{"generator": ' + JSON.stringify(out.generator) + ',\n "chats": [\n' +
    lines(out.chats) + '\n ],\n "prompts": [\n' + lines(out.prompts) + '\n ]\n}\n');
})().catch((e) => { console.error(e); process.exit(1); });
