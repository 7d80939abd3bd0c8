// An example fairdispatch worker in Node.js. It follows docs/protocol.md,
// "Writing a worker: checklist", step by step (the numbers below are the
// checklist's), and needs nothing but the official NATS client (npm "nats").
// It simulates work: each request is held HOLD_MS milliseconds, then +ACKed.
//
// Environment:
//   NATS_URL            NATS server, default nats://127.0.0.1:4222
//   WORKER_ID           the worker id, [A-Za-z0-9_-]{1,128}; required
//   SUBJECT_PREFIX      the dispatcher's --subject-prefix, default "dispatch"
//   MAX_ACTIVE          requests per rank at once, reported as max_active_requests; default 4
//   HOLD_MS             simulated work per request, in ms; default 5
//   TTL_MS              the report ttl_ms, default 3000
//   ACK_WAIT_MS         fallback ack wait for a dispatch without Dispatch-Ack-Wait-Ms
//                       (an older dispatcher); default 30000
//   COMPLETION_RECORDS  "1": publish a JSON completion record on
//                       <prefix>.done.<id> per finished request, as the Go mock
//                       worker does, for the end-to-end tests; not part of the protocol
//
// Run: npm ci && WORKER_ID=node-1 node worker.js
"use strict";

const crypto = require("node:crypto");
const { connect, headers, Match } = require("nats");

const env = process.env;
const prefix = env.SUBJECT_PREFIX || "dispatch";
const id = env.WORKER_ID || "";
const maxActive = intEnv("MAX_ACTIVE", 4, 1, 1000000);
const holdMs = intEnv("HOLD_MS", 5, 0, 86400000);
const ttlMs = intEnv("TTL_MS", 3000, 100, 600000);
const fallbackAckWaitMs = intEnv("ACK_WAIT_MS", 30000, 3, 2592000000);
const completionRecords = env.COMPLETION_RECORDS === "1";

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
// running joins it (its Dispatch-Ack subjects are all kept alive and all +ACKed).
const running = new Map();

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

function uintHeader(m, name) {
  const s = header(m, name).trim();
  return /^[0-9]+$/.test(s) ? Number(s) : NaN;
}

async function main() {
  const nc = await connect({ servers: env.NATS_URL || "nats://127.0.0.1:4222", name: `node-worker-${id}` });
  const enc = new TextEncoder();
  const workSubj = `${prefix}.work.${id}`;
  const loadSubj = `${prefix}.load.${id}`;

  // 7. Load reports: on every change (coalesced a few ms, but at once when a
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
    for (const r of running.values()) if (!r.prefilled) n += r.cost;
    return n;
  }

  // 5. Keep alive: +WPI at once, then every third of the dispatch's ack wait.
  function keepAlive(r) {
    for (const ack of r.acks) nc.publish(ack, enc.encode("+WPI"));
  }

  // 6. Finish exactly once: +ACK every ack subject the request was dispatched with.
  function finish(r) {
    clearInterval(r.progress);
    running.delete(r.requestId);
    active--;
    for (const ack of r.acks) nc.publish(ack, enc.encode("+ACK"));
    if (completionRecords) {
      nc.publish(`${prefix}.done.${id}`, enc.encode(JSON.stringify({
        request_id: r.requestId, class: r.cls, worker_id: id, dp_rank: rank, seq: r.seq,
      })));
    }
    reportNow(); // a freed slot is reported at once: the dispatcher waits for it
  }

  // 2. Subscribe in a queue group named after the id: should a second process
  // run under this id by mistake, each dispatch still reaches only one of them.
  const sub = nc.subscribe(workSubj, { queue: id });
  (async () => {
    for await (const m of sub) {
      // 3. Answer every dispatch at once.
      const requestId = header(m, "Dispatch-Request-Id");
      const seq = uintHeader(m, "Dispatch-Seq");
      const dpRank = uintHeader(m, "Dispatch-DP-Rank");
      const ack = header(m, "Dispatch-Ack");
      const ackWaitMs = uintHeader(m, "Dispatch-Ack-Wait-Ms");
      const cost = uintHeader(m, "Dispatch-Cost");
      if (!m.reply) {
        log("warn", "dispatch without a reply subject", { request_id: requestId });
        continue;
      }
      // 9. A second dispatch of a request already running: accept, keep it
      // running, keep every Dispatch-Ack alive, +ACK them all at the end.
      const same = running.get(requestId);
      let accept;
      if (same) {
        if (ack && !same.acks.includes(ack)) {
          same.acks.push(ack);
          nc.publish(ack, enc.encode("+WPI"));
        }
        accept = true;
      } else {
        accept = !draining && dpRank === rank && active < maxActive && ack !== "";
      }
      if (accept && !same) {
        // 4. Count before you report: the request is in the load before
        // seen_seq covers its Dispatch-Seq.
        active++;
        const period = Math.max(1, Math.floor((ackWaitMs > 0 ? ackWaitMs : fallbackAckWaitMs) / 3));
        const r = { requestId, seq, cls: header(m, "Dispatch-Class"), cost: cost > 0 ? cost : 0, acks: [ack], prefilled: false };
        r.progress = setInterval(() => keepAlive(r), period);
        running.set(requestId, r);
        keepAlive(r); // at once
        setTimeout(() => { r.prefilled = true; finish(r); }, holdMs);
      }
      if (Number.isSafeInteger(seq) && seq > seenSeq) seenSeq = seq; // refused ones too
      if (accept) {
        m.respond(); // empty, no Dispatch-Status: accepted
      } else {
        const h = headers();
        h.set("Dispatch-Status", "busy");
        m.respond(new Uint8Array(0), { headers: h });
      }
      reportSoon();
    }
  })();

  report();
  await nc.flush();
  log("info", "worker started", { subject: workSubj });

  // 8. Drain before stopping: report draining, finish what is held, stop.
  let stopping = false;
  async function stop(signal) {
    if (stopping) return;
    stopping = true;
    draining = true;
    report();
    log("info", "draining", { signal, held: running.size });
    while (running.size > 0) await new Promise((res) => setTimeout(res, 10));
    clearInterval(heartbeat);
    if (reportTimer !== null) clearTimeout(reportTimer);
    report();
    await sub.drain();
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

main().catch((err) => fail(String(err && err.stack ? err.stack : err)));
