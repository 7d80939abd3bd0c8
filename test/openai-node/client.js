// Drives the official openai npm client, unmodified, against a fairdispatch
// gateway for test/e2e (gateway_clients_test.go, engineworker_test.go). It
// reads a plan (a JSON array of calls) from argv[2], or from stdin when
// there is no argv[2] (a plan too long for one argument), and prints one
// JSON line per call, in the plan's order:
//   {"name", "ok", "texts": [...], "chunks": n, "usage": {...}|null,
//    "usage_chunk": i|null, "finish": "...",
//    "error": {"class", "status", "code", "retry_after", "message"}|null}
// texts are the non-empty contents in the order they came (one per chunk of
// a stream), chunks the stream's chunks, usage_chunk the index of the chunk
// that carried the usage. A call may give its chat messages ("messages");
// the default is a system prompt and call.content.
// Environment: GATEWAY_URL (the gateway's base URL, with /v1); CONCURRENCY
// (at most that many calls in flight; unset or 0: every call at once).
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
  const out = { name: call.name, ok: false, texts: [], chunks: 0, usage: null, usage_chunk: null, finish: null, error: null };
  try {
    if (call.idempotency_key) opts.idempotencyKey = call.idempotency_key, opts.headers['Idempotency-Key'] = call.idempotency_key;
    if (call.kind === 'chat') {
      const body = { model: call.model, max_tokens: call.max_tokens,
        messages: call.messages || [{ role: 'system', content: 'You are brief.' }, { role: 'user', content: call.content }] };
      if (call.stream) {
        body.stream = true;
        if (call.include_usage) body.stream_options = { include_usage: true };
        const stream = await client.chat.completions.create(body, opts);
        for await (const chunk of stream) {
          if (chunk.usage) out.usage = chunk.usage, out.usage_chunk = out.chunks;
          out.chunks++;
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
          if (chunk.usage) out.usage = chunk.usage, out.usage_chunk = out.chunks;
          out.chunks++;
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

async function readStdin() {
  const parts = [];
  for await (const b of process.stdin) parts.push(b);
  return Buffer.concat(parts).toString('utf8');
}

(async () => {
  const plan = JSON.parse(process.argv.length > 2 ? process.argv[2] : await readStdin());
  const limit = Number(process.env.CONCURRENCY) || plan.length;
  const results = new Array(plan.length);
  let next = 0;
  const lane = async () => {
    while (next < plan.length) {
      const i = next++;
      results[i] = await one(plan[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, plan.length) }, lane));
  for (const r of results) process.stdout.write(JSON.stringify(r) + '\n');
})().catch((e) => { console.error(e); process.exit(1); });
