// An example fairdispatch worker in Node.js. It follows docs/protocol.md,
// "Writing a worker: checklist", step by step (the numbers below are the
// checklist's), and needs nothing but the official NATS client (npm "nats").
// It simulates work: each request is held HOLD_MS milliseconds, then +ACKed.
// A request that asks for a response (Dispatch-Response-To) is streamed
// instead: CHUNKS chunks, one every CHUNK_MS, with the claim, pings and end
// marker of docs/protocol.md, Responses (checklist item 17).
//
// Environment:
//   NATS_URL            NATS server, default nats://127.0.0.1:4222
//   NATS_USER, NATS_PASSWORD
//                       the worker's NATS user, when the server has permissions
//                       (docs/security.md; configs/nats-accounts.conf)
//   NATS_INBOX_PREFIX   the inbox prefix its permissions grant, e.g. _INBOX_worker_w1
//                       (docs/protocol.md, Permissions a worker needs): the
//                       answers to confirmed acknowledgements and on the
//                       response path come there; default _INBOX
//   WORKER_ID           the worker id, [A-Za-z0-9_-]{1,128}; required
//   SUBJECT_PREFIX      the dispatcher's --subject-prefix, default "dispatch"
//   MAX_ACTIVE          requests per rank at once, reported as max_active_requests; default 4
//   HOLD_MS             simulated work per request, in ms; default 5
//   TTL_MS              the report ttl_ms, default 3000
//   ACK_WAIT_MS         fallback ack wait for a dispatch without Dispatch-Ack-Wait-Ms
//                       (an older dispatcher); default 30000
//   CHUNKS              chunks of a response, default 4; a request's Dispatch-Output-Tokens
//                       (the mock worker's convention) overrides it
//   CHUNK_MS            ms between two chunks, default 5
//   COMPLETION_RECORDS  "1": publish a JSON completion record on
//                       <prefix>.done.<id> per dispatch accepted, as the Go mock
//                       worker does (loadgen counts them), for the end-to-end tests;
//                       its token counts are 0 (this example computes none), so
//                       under settlement every request is refunded: a real worker
//                       reports what it computed
//   PLAIN_ACKS          "1": publish +ACK, +TERM and -NAK as plain messages instead of
//                       confirmed ones (checklist item 7), for a NATS user that may not
//                       subscribe to its inbox; an acknowledgement lost around a NATS
//                       server restart then lets the request run again
//   HEADER_FORM         "1": ask for dispatches in the header form (NATS headers)
//                       instead of the compact form (checklist item 15), which
//                       costs this worker's NATS client and the dispatcher less CPU
//                       per request; either way both forms are read
//   LOG_REQUESTS        "1": log one line per dispatch answered, with what was done with
//                       it: "run", "joined" (a second dispatch of a running request),
//                       "finished" (a request finished within the last 5 minutes) or
//                       "refused"; for the end-to-end tests
//
// Run: npm ci && WORKER_ID=node-1 node worker.js
"use strict";

const crypto = require("node:crypto");
const { connect, headers, Match, ErrorCode } = require("nats");

const env = process.env;
const prefix = env.SUBJECT_PREFIX || "dispatch";
const id = env.WORKER_ID || "";
const maxActive = intEnv("MAX_ACTIVE", 4, 1, 1000000);
const holdMs = intEnv("HOLD_MS", 5, 0, 86400000);
const ttlMs = intEnv("TTL_MS", 3000, 100, 600000);
const fallbackAckWaitMs = intEnv("ACK_WAIT_MS", 30000, 3, 2592000000);
const completionRecords = env.COMPLETION_RECORDS === "1";
const plainAcks = env.PLAIN_ACKS === "1";
const headerForm = env.HEADER_FORM === "1";
const logRequests = env.LOG_REQUESTS === "1";
const defaultChunks = intEnv("CHUNKS", 4, 0, 1000000);
const chunkMs = intEnv("CHUNK_MS", 5, 0, 86400000);
// The response path's timing (docs/protocol.md, Timeouts and bounds).
const ANSWER_MS = 1000, PING_MS = 1000, CLAIM_ATTEMPTS = 3, CLAIM_RETRY_MS = 500, PING_MISSES = 3, END_ATTEMPTS = 3;
// Confirmed acknowledgements: the wait before another attempt after "no
// responders", doubling (docs/protocol.md, After accepting).
const ACK_BACKOFF_MIN_MS = 20, ACK_BACKOFF_MAX_MS = 500;
// The finished-request memory (docs/protocol.md, A dispatch of a request
// already finished): 5 minutes, at most 100,000 ids, the oldest out first.
const FINISHED_MS = 5 * 60 * 1000, FINISHED_IDS = 100000;

// 1. An id and a new random instance per process start.
if (!/^[A-Za-z0-9_-]{1,128}$/.test(id)) {
  fail(`WORKER_ID ${JSON.stringify(id)}: want [A-Za-z0-9_-]+, at most 128 bytes`);
}
const instance = crypto.randomBytes(8).toString("hex");

// One rank (data_parallel_start_rank 0, size 1).
const rank = 0;
let active = 0; // requests accepted and not finished, counted at acceptance
let seenSeq = 0; // the highest Dispatch-Seq answered (accepted or refused)
let draining = false;
// Running requests by Dispatch-Request-Id: a second dispatch of one already
// running joins it (its Dispatch-Ack subjects are all kept alive, and the
// request acknowledged once on the latest, checklist item 8).
const running = new Map();
// 12. Requests finished here (+ACK or +TERM) by Dispatch-Request-Id, in
// finishing order (a Map keeps insertion order): a dispatch of one is
// acknowledged again at once, without running it.
const finished = new Map();
let pendingAcks = 0; // confirmed acknowledgements not answered yet
let connected = true;

function remember(requestId, ackBody) {
  finished.delete(requestId);
  finished.set(requestId, { at: Date.now(), ackBody });
  while (finished.size > FINISHED_IDS) finished.delete(finished.keys().next().value);
}

function recall(requestId) {
  const now = Date.now();
  for (const [k, v] of finished) {
    if (now - v.at <= FINISHED_MS) break;
    finished.delete(k);
  }
  return finished.get(requestId);
}

const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

function intEnv(name, def, lo, hi) {
  const s = env[name];
  if (s === undefined || s === "") return def;
  if (!/^[0-9]+$/.test(s) || Number(s) < lo || Number(s) > hi) {
    fail(`${name} ${JSON.stringify(s)}: want an integer in [${lo}, ${hi}]`);
  }
  return Number(s);
}

function fail(msg) {
  console.error(`node-worker: ${msg}`);
  process.exit(2);
}

function log(level, msg, fields) {
  console.log(JSON.stringify({ level, component: "node-worker", worker_id: id, instance, msg, ...fields }));
}

// Dispatch-* header names match case-insensitively: the dispatcher sends its
// own in the casing of docs/protocol.md, forwarded producer headers keep the
// producer's casing.
function header(m, name) {
  return m.headers ? m.headers.get(name, Match.IgnoreCase) : "";
}

function uint(s) {
  s = s.trim();
  return /^[0-9]+$/.test(s) ? Number(s) : NaN;
}

// 15. A dispatch in either form, as one object: its fields, and header(name)
// for the producer's headers (case-insensitive; "" when absent). A dispatch
// with NATS headers is in the header form; one without is a compact frame.
function readDispatch(m) {
  if (m.headers) {
    const h = (name) => header(m, name);
    return {
      requestId: h("Dispatch-Request-Id"), cls: h("Dispatch-Class"), dpRank: uint(h("Dispatch-DP-Rank")),
      seq: uint(h("Dispatch-Seq")), cost: uint(h("Dispatch-Cost")), ack: h("Dispatch-Ack"),
      ackWaitMs: uint(h("Dispatch-Ack-Wait-Ms")), header: h,
    };
  }
  return decodeFrame(m.data);
}

// 5. bookedPrefill is the prefill tokens the dispatcher booked for dispatch
// d on this rank: Dispatch-Prefill-Tokens when sent (it differs from the
// cost when the rank caches part of the prompt), else Dispatch-Cost.
function bookedPrefill(d) {
  const p = uint(d.header("Dispatch-Prefill-Tokens"));
  return Number.isSafeInteger(p) ? p : d.cost > 0 ? d.cost : 0;
}

// decodeFrame decodes a compact dispatch frame (docs/protocol.md, Compact
// dispatch form): version 1, then varints (unsigned LEB128) and strings
// (a varint length, then UTF-8 bytes), then the producer's headers (name,
// value count, values) up to an empty name, then the body. It throws on
// anything else.
const utf8 = new TextDecoder("utf-8"); // as Go reads them: any bytes
function decodeFrame(b) {
  if (b.length === 0 || b[0] !== 1) throw new Error("not a version 1 frame");
  let i = 1;
  const varint = () => {
    let x = 0;
    for (let mul = 1; i < b.length && mul <= 2 ** 49; mul *= 128) {
      const c = b[i++];
      x += (c & 0x7f) * mul;
      if (c < 0x80) {
        if (!Number.isSafeInteger(x)) break;
        return x;
      }
    }
    throw new Error("bad varint");
  };
  const str = () => {
    const n = varint();
    if (n > b.length - i) throw new Error("string past the end");
    const s = utf8.decode(b.subarray(i, i + n));
    i += n;
    return s;
  };
  const d = { requestId: str(), cls: str(), dpRank: varint(), seq: varint(), cost: varint(), queuedMs: varint(), ack: str(), ackWaitMs: varint() };
  if (d.dpRank > 65535) throw new Error("dp rank over 65535");
  const hdrs = new Map(); // lower-case name -> first value
  for (let name = str(); name !== ""; name = str()) {
    const vals = [];
    for (let n = varint(); n > 0; n--) vals.push(str());
    const k = name.toLowerCase();
    if (!hdrs.has(k) && vals.length > 0) hdrs.set(k, vals[0]);
  }
  d.header = (name) => hdrs.get(name.toLowerCase()) || "";
  d.body = b.subarray(i);
  return d;
}

async function main() {
  // Reconnect forever: the embedded server stops with the dispatcher and is back when it restarts.
  const opts = { servers: env.NATS_URL || "nats://127.0.0.1:4222", name: `node-worker-${id}`, maxReconnectAttempts: -1 };
  if (env.NATS_USER) Object.assign(opts, { user: env.NATS_USER, pass: env.NATS_PASSWORD || "" });
  if (env.NATS_INBOX_PREFIX) opts.inboxPrefix = env.NATS_INBOX_PREFIX;
  const nc = await connect(opts);
  const enc = new TextEncoder();
  (async () => {
    for await (const st of nc.status()) {
      if (st.type === "disconnect") connected = false;
      else if (st.type === "reconnect") connected = true;
    }
  })();

  // 7. Acknowledge, confirmed: send the body as a NATS request and send it
  // again until JetStream answers. +ACK and +TERM are sent again after an
  // unanswered attempt and after "no responders" (JetStream still
  // recovering its consumer after a server restart); -NAK only after "no
  // responders", since an unanswered one may have taken effect. Nothing is
  // sent while disconnected. Given up once the request's ack wait has passed
  // and an attempt made while connected was still unanswered: JetStream may
  // redeliver it then. With PLAIN_ACKS, a plain publish.
  async function acknowledge(subject, body, ackWaitMs, requestId) {
    if (plainAcks) {
      nc.publish(subject, enc.encode(body));
      return;
    }
    pendingAcks++;
    try {
      const deadline = Date.now() + ackWaitMs;
      let backoff = ACK_BACKOFF_MIN_MS;
      for (let attempt = 1; ; attempt++) {
        while (!connected && !nc.isClosed()) await sleep(50);
        if (nc.isClosed()) return;
        let noResponders = false;
        try {
          await nc.request(subject, enc.encode(body), { timeout: ANSWER_MS });
          return; // JetStream answered
        } catch (err) {
          noResponders = !!err && err.code === ErrorCode.NoResponders;
        }
        if ((!noResponders && body.startsWith("-NAK")) || (connected && Date.now() > deadline)) {
          log("warn", "acknowledgement not confirmed; the request may be dispatched again", { request_id: requestId, body, attempts: attempt });
          return;
        }
        if (noResponders) {
          await sleep(backoff);
          backoff = Math.min(2 * backoff, ACK_BACKOFF_MAX_MS);
        }
      }
    } finally {
      pendingAcks--;
    }
  }
  const workSubj = `${prefix}.work.${id}`;
  const loadSubj = `${prefix}.load.${id}`;

  // 9. Load reports: on every change (coalesced a few ms, but at once when a
  // request finishes) and every ttl_ms / 3.
  let reportTimer = null;
  function report() {
    const r = {
      worker_id: id,
      data_parallel_start_rank: 0,
      data_parallel_size: 1,
      max_active_requests: maxActive,
      draining,
      ttl_ms: ttlMs,
      instance,
      seen_seq: seenSeq, // always present, from 0
      ranks: [{ dp_rank: rank, active_requests: active, active_prefill_tokens: prefillTokens() }],
    };
    if (!headerForm) r.compact_dispatch = 1; // 15. the compact form, version 1
    nc.publish(loadSubj, enc.encode(JSON.stringify(r)));
  }
  function reportSoon() {
    if (reportTimer === null) {
      reportTimer = setTimeout(() => {
        reportTimer = null;
        report();
      }, 2);
    }
  }
  function reportNow() {
    if (reportTimer !== null) {
      clearTimeout(reportTimer);
      reportTimer = null;
    }
    report();
  }
  const heartbeat = setInterval(report, Math.floor(ttlMs / 3));

  function prefillTokens() {
    let n = 0;
    for (const r of running.values()) if (!r.prefilled) n += r.booked;
    return n;
  }

  // 6. Keep alive: +WPI at once, then every third of the dispatch's ack wait.
  function keepAlive(r) {
    for (const ack of r.acks) nc.publish(ack, enc.encode("+WPI"));
  }

  // 7. Finish exactly once: +ACK (+TERM to drop it, nothing at all when
  // another execution took it). Confirmed, one acknowledgement on the latest
  // delivery's subject is enough (JetStream matches by stream sequence);
  // plain, every subject the request was dispatched with gets one, so that
  // one lost does not leave the message. A request finished here is
  // remembered (12); one handed back would not be.
  function finish(r, ackBody = "+ACK", status = "ok") {
    if (r.finished) return;
    r.finished = true;
    clearInterval(r.progress);
    clearTimeout(r.work);
    if (r.resp) clearTimeout(r.resp.pingTimer);
    running.delete(r.requestId);
    active--;
    if (ackBody !== null) {
      if (ackBody === "+ACK" || ackBody.startsWith("+TERM")) remember(r.requestId, ackBody);
      if (plainAcks) {
        for (const ack of r.acks) nc.publish(ack, enc.encode(ackBody));
      } else {
        acknowledge(r.acks[r.acks.length - 1], ackBody, r.ackWaitMs, r.requestId);
      }
    }
    if (completionRecords && ackBody !== null) {
      // One record per dispatch accepted (this example computes no token counts).
      for (const seq of r.seqs) record(r.requestId, r.cls, seq, status);
    }
    reportNow(); // a freed slot is reported at once: the dispatcher waits for it
  }
  function record(requestId, cls, seq, status) {
    nc.publish(`${prefix}.done.${id}`, enc.encode(JSON.stringify({
      request_id: requestId, class: cls, worker_id: id, dp_rank: rank, seq, status, prefill_tokens: 0, output_tokens: 0,
    })));
  }

  // 17. Responses (docs/protocol.md, Responses). Every message on the
  // response subject carries the kind, the request id and this execution's id.
  function respMsg(r, kind, seq) {
    const h = headers();
    h.set("Dispatch-Response", kind);
    h.set("Dispatch-Request-Id", r.requestId);
    h.set("Dispatch-Execution", r.resp.exec);
    if (seq !== undefined) h.set("Dispatch-Response-Seq", String(seq));
    return h;
  }
  // ask sends a NATS request and resolves to the answer's Dispatch-Response
  // ("" when none), "no-responders" or "timeout".
  async function ask(r, h, body) {
    try {
      const m = await nc.request(r.resp.subject, body || new Uint8Array(0), { timeout: ANSWER_MS, headers: h });
      return m.headers ? m.headers.get("Dispatch-Response", Match.IgnoreCase).trim() : "";
    } catch (err) {
      if (err && err.code === ErrorCode.NoResponders) return "no-responders";
      return "timeout";
    }
  }
  // A subject starting with "$" or the prefix, or over 1,024 bytes (a longer
  // one would make the server close the connection), is not one to respond to.
  function validResponseSubject(s) {
    return s !== "" && Buffer.byteLength(s) <= 1024 && !s.startsWith("$") && !s.startsWith(`${prefix}.`) &&
      s.split(".").every((t) => t !== "" && t !== "*" && t !== ">" && !/\s/.test(t));
  }
  // The claim: after accepting, before any work; 3 attempts.
  async function claim(r) {
    for (let attempt = 1; attempt <= CLAIM_ATTEMPTS; attempt++) {
      const a = await ask(r, respMsg(r, "claim"));
      if (r.finished) return;
      if (a === "cancel") return finish(r, "+TERM cancelled", "cancelled"); // do not run it
      if (a === "taken") return finish(r, null); // another execution holds the message: no ack at all
      if (a === "no-responders") {
        await new Promise((res) => setTimeout(res, CLAIM_RETRY_MS));
        continue;
      }
      if (a === "timeout") continue;
      return stream(r); // go, or any other answer
    }
    finish(r, "+TERM", "cancelled"); // nobody listens
  }
  // Chunks, numbered from 1, one every CHUNK_MS; pings every second meanwhile.
  function stream(r) {
    const p = r.resp;
    p.open = true;
    // At most one ping out; the next goes 1 s after the previous was sent.
    const ping = async () => {
      if (!p.open || r.finished) return;
      const sentAt = Date.now();
      const a = await ask(r, respMsg(r, "ping", p.sent));
      if (!p.open || r.finished) return;
      if (a === "cancel") return stopRequest(r, "cancelled by the producer");
      if (a === "taken") { p.open = false; return finish(r, null); }
      if (a === "no-responders") { p.open = false; return finish(r, "+TERM", "cancelled"); }
      p.misses = a === "timeout" ? p.misses + 1 : 0;
      if (p.misses >= PING_MISSES) { p.open = false; return finish(r, "+TERM", "cancelled"); }
      p.pingTimer = setTimeout(ping, Math.max(0, PING_MS - (Date.now() - sentAt)));
    };
    p.pingTimer = setTimeout(ping, PING_MS);
    const next = () => {
      if (!p.open || r.finished) return;
      if (p.sent === p.chunks) return end(r, { status: "ok", chunks: p.sent, finish_reason: "stop" }, "+ACK");
      p.sent++;
      nc.publish(p.subject, enc.encode(`chunk ${p.sent}`), { headers: respMsg(r, "chunk", p.sent) });
      r.work = setTimeout(next, chunkMs);
    };
    r.prefilled = true;
    next();
  }
  // The end marker: a request, up to 3 attempts; then the acknowledgement.
  async function end(r, body, ackBody) {
    const p = r.resp;
    p.open = false;
    clearTimeout(p.pingTimer);
    const h = respMsg(r, "end", p.sent + 1);
    h.set("Dispatch-Response-Status", body.status);
    for (let attempt = 1; attempt <= END_ATTEMPTS; attempt++) {
      const a = await ask(r, h, enc.encode(JSON.stringify(body)));
      if (a !== "timeout") break; // answered, or nobody listens
    }
    finish(r, ackBody, body.status);
  }
  // 16. Stop a request: a claimed response ends with status cancelled.
  function stopRequest(r, why) {
    if (r.finished) return;
    clearTimeout(r.work);
    if (r.resp && r.resp.open) return end(r, { status: "cancelled", chunks: r.resp.sent, error: why }, "+TERM cancelled");
    finish(r, "+TERM cancelled", "cancelled");
  }

  // 2. Subscribe in a queue group named after the id: should a second process
  // run under this id by mistake, each dispatch still reaches only one of them.
  const sub = nc.subscribe(workSubj, { queue: id });
  (async () => {
    for await (const m of sub) {
      // 3. Answer every dispatch at once.
      if (!m.reply) {
        log("warn", "dispatch without a reply subject", {});
        continue;
      }
      let d;
      try {
        d = readDispatch(m);
      } catch (err) {
        // Neither form: a bug on the sender's side (docs/protocol.md, Telling the forms apart).
        log("error", "dispatch without headers that is not a compact frame; refusing it", { bytes: m.data.length, error: String(err) });
        const h = headers();
        h.set("Dispatch-Status", "malformed");
        m.respond(new Uint8Array(0), { headers: h });
        continue;
      }
      const { requestId, seq, dpRank, ack, ackWaitMs, cost } = d;
      // 8. A second dispatch of a request already running: accept (even
      // while draining), keep it running, keep every Dispatch-Ack alive,
      // acknowledge at the end. 12. A dispatch of a request finished here
      // within 5 minutes: accept and acknowledge it at once as it was
      // finished, without running it again.
      const same = running.get(requestId);
      const done = same || requestId === "" ? undefined : recall(requestId);
      let accept, action;
      if (same) {
        if (ack && !same.acks.includes(ack)) {
          same.acks.push(ack);
          nc.publish(ack, enc.encode("+WPI"));
        }
        if (Number.isSafeInteger(seq)) same.seqs.push(seq);
        accept = true;
        action = "joined";
      } else if (done) {
        accept = true;
        action = "finished";
      } else {
        accept = !draining && dpRank === rank && active < maxActive && ack !== "";
        action = accept ? "run" : "refused";
      }
      if (logRequests) log("info", "dispatch", { request_id: requestId, seq, action });
      if (accept && !same && !done) {
        // 5. Count before you report: the request is in the load before
        // seen_seq covers its Dispatch-Seq, with what the dispatcher booked.
        active++;
        const ackWait = ackWaitMs > 0 ? ackWaitMs : fallbackAckWaitMs;
        const period = Math.max(1, Math.floor(ackWait / 3));
        const r = { requestId, seq, seqs: [seq], cls: d.cls, booked: bookedPrefill(d), acks: [ack],
          ackWaitMs: ackWait, prefilled: false };
        r.progress = setInterval(() => keepAlive(r), period);
        running.set(requestId, r);
        keepAlive(r); // at once
        const respTo = d.header("Dispatch-Response-To").trim();
        if (respTo === "") {
          r.work = setTimeout(() => { r.prefilled = true; finish(r); }, holdMs);
        } else if (!validResponseSubject(respTo)) {
          log("error", "Dispatch-Response-To may not be responded to; dropping the request", { request_id: requestId });
          setImmediate(() => finish(r, "+TERM"));
        } else {
          const n = uint(d.header("Dispatch-Output-Tokens"));
          r.resp = { subject: respTo, exec: `${id}/${instance}/${seq}`, chunks: Number.isSafeInteger(n) ? n : defaultChunks,
            sent: 0, open: false, misses: 0, pingTimer: null };
          setImmediate(() => claim(r)); // after the reply below has gone out
        }
      }
      if (Number.isSafeInteger(seq) && seq > seenSeq) seenSeq = seq; // refused ones too
      if (accept) {
        m.respond(); // empty, no Dispatch-Status: accepted
      } else {
        const h = headers();
        h.set("Dispatch-Status", "busy");
        m.respond(new Uint8Array(0), { headers: h });
      }
      if (done && ack !== "") {
        if (plainAcks) nc.publish(ack, enc.encode(done.ackBody));
        else acknowledge(ack, done.ackBody, ackWaitMs > 0 ? ackWaitMs : fallbackAckWaitMs, requestId);
        if (completionRecords && Number.isSafeInteger(seq)) record(requestId, d.cls, seq, "ok");
      }
      reportSoon();
    }
  })();

  // 16. Cancellations of running requests, from the dispatcher.
  const cancelSub = nc.subscribe(`${prefix}.cancel.${id}`);
  (async () => {
    for await (const m of cancelSub) {
      let c;
      try { c = JSON.parse(new TextDecoder().decode(m.data)); } catch { continue; }
      const r = c && typeof c.request_id === "string" ? running.get(c.request_id) : undefined;
      if (r) stopRequest(r, "cancelled by the dispatcher"); // an id not running here is ignored
    }
  })();

  report();
  await nc.flush();
  log("info", "worker started", { subject: workSubj });

  // 10. Drain before stopping: report draining, finish what is held, stop.
  let stopping = false;
  async function stop(signal) {
    if (stopping) return;
    stopping = true;
    draining = true;
    report();
    log("info", "draining", { signal, held: running.size });
    while (running.size > 0) await sleep(10);
    // The confirmations outstanding, for at most 10 s.
    for (const until = Date.now() + 10000; pendingAcks > 0 && Date.now() < until;) await sleep(10);
    clearInterval(heartbeat);
    if (reportTimer !== null) clearTimeout(reportTimer);
    report();
    await sub.drain();
    await cancelSub.drain();
    await nc.drain();
    log("info", "worker stopped", {});
    process.exit(0);
  }
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
  nc.closed().then((err) => {
    if (!stopping) {
      log("error", "connection closed", { error: err ? String(err) : "" });
      process.exit(1);
    }
  });
}

if (require.main === module) {
  main().catch((err) => fail(String(err && err.stack ? err.stack : err)));
}
module.exports = { decodeFrame, bookedPrefill }; // for test/e2e/nodeworker_test.go
