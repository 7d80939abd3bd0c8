// Drives the official openai npm client, unmodified, against a fairdispatch
// gateway for test/e2e (gateway_clients_test.go). It reads a plan (a JSON
// array of calls) from argv[2] and prints one JSON line per call:
//   {"name", "ok", "texts": [...], "usage": {...}|null, "finish": "...",
//    "error": {"class", "status", "code", "retry_after", "message"}|null}
// Environment: GATEWAY_URL (the gateway's base URL, with /v1).
'use strict';
const OpenAI = require('openai');

async function one(call) {
  const client = new OpenAI({
    baseURL: process.env.GATEWAY_URL,
    apiKey: call.key,
    maxRetries: call.max_retries ?? 0,
    timeout: 60000,
  });
  const opts = { headers: call.headers || {} };
  const out = { name: call.name, ok: false, texts: [], usage: null, finish: null, error: null };
  try {
    if (call.idempotency_key) opts.idempotencyKey = call.idempotency_key, opts.headers['Idempotency-Key'] = call.idempotency_key;
    if (call.kind === 'chat') {
      const body = { model: call.model, max_tokens: call.max_tokens,
        messages: [{ role: 'system', content: 'You are brief.' }, { role: 'user', content: call.content }] };
      if (call.stream) {
        body.stream = true;
        if (call.include_usage) body.stream_options = { include_usage: true };
        const stream = await client.chat.completions.create(body, opts);
        for await (const chunk of stream) {
          if (chunk.usage) out.usage = chunk.usage;
          for (const c of chunk.choices) {
            if (c.delta && c.delta.content) out.texts.push(c.delta.content);
            if (c.finish_reason) out.finish = c.finish_reason;
          }
        }
      } else {
        const r = await client.chat.completions.create(body, opts);
        out.texts.push(r.choices[0].message.content);
        out.finish = r.choices[0].finish_reason;
        out.usage = r.usage;
      }
    } else {
      const body = { model: call.model, max_tokens: call.max_tokens, prompt: call.content.repeat(call.repeat ?? 1) };
      if (call.stream) {
        body.stream = true;
        if (call.include_usage) body.stream_options = { include_usage: true };
        const stream = await client.completions.create(body, opts);
        for await (const chunk of stream) {
          if (chunk.usage) out.usage = chunk.usage;
          for (const c of chunk.choices) {
            if (c.text) out.texts.push(c.text);
            if (c.finish_reason) out.finish = c.finish_reason;
          }
        }
      } else {
        const r = await client.completions.create(body, opts);
        out.texts.push(r.choices[0].text);
        out.finish = r.choices[0].finish_reason;
        out.usage = r.usage;
      }
    }
    out.ok = true;
  } catch (e) {
    const h = e.headers;
    const retryAfter = h && typeof h.get === 'function' ? h.get('retry-after') : (h ? h['retry-after'] : null);
    out.error = { class: e.constructor.name, status: e.status ?? null, code: e.code ?? null,
      retry_after: retryAfter ?? null, message: String(e.message) };
  }
  return out;
}

(async () => {
  const plan = JSON.parse(process.argv[2]);
  const results = await Promise.all(plan.map(one));
  for (const r of results) process.stdout.write(JSON.stringify(r) + '\n');
})().catch((e) => { console.error(e); process.exit(1); });
