#!/usr/bin/env node
// SPDX-License-Identifier: MIT
// bench/peers/cockatiel.js - the peer driver of nresrun: one cell of a
// scenario run by cockatiel (npm; the JavaScript port of Polly, the peer of
// the reference suite) instead of nres, printing the same JSON line.
//
//   node bench/peers/cockatiel.js '<json cell spec>'    one cell, one JSON line
//   node bench/peers/cockatiel.js --self-test           runs tiny cells, checks them
//                                                       (the http one: NRESRUN=path)
//   node bench/peers/cockatiel.js --help
//
// It is separate from lua/nres/cell.lua because it is the same cell in
// another runtime: nresrun's runner spawns it like a cell child (see
// lua/nres/runner.lua) with { arm, dependency, workers | rate, warmup,
// window, seed, max_inflight }, and it mirrors cell.lua and dep.lua - the
// closed loop (N async workers calling back to back, yielding to
// the event loop every 64 operations when N > 1), the open loop (a pacer
// starting arrivals on schedule, latency from the scheduled time, lag over
// 1 ms = missed, no free slot under max_inflight = shed), the accounting
// identity, the log-linear histogram (nres_hist_index), and the in-process
// dependency models (fail_every / fail_prob / throttle_every by one shared
// counter, latency fixed / uniform / lognormal, phases) - so a ratio to the
// JS raw arm means the same thing as a ratio to nres's raw arm. One
// deliberate difference: the pacer blocks instead of spinning (see pump).
//
// Arms (the closest cockatiel equivalent of each nres arm):
//   empty          no policy: the dependency called directly - the JS raw
//                  baseline (nresrun.raw). Synchronous when the dependency is.
//   passthrough    cockatiel's `noop` policy (nres preset "none").
//   retry          retry(handleAll, { maxAttempts: 2 }): 3 attempts in all,
//                  first included (cockatiel's maxAttempts counts retries),
//                  no backoff (preset "trivial"). NOTE: cockatiel has no
//                  zero delay: without a backoff it waits ConstantBackoff(0)
//                  = setTimeout(0), which Node rounds up to 1 ms, per retry.
//   retry-timeout  wrap(retry as above, timeout(10 s, Aggressive)): each
//                  attempt bounded like nres's attempt_timeout = 10.
//   default        nres preset "default" minus the budget (cockatiel has
//                  none): wrap(timeout(30 s, Aggressive) [the deadline],
//                  retry(all but BrokenCircuitError, { maxAttempts: 2,
//                  backoff: ExponentialBackoff{ initialDelay 100 ms,
//                  exponent 2, maxDelay 30 s, fullJitterGenerator } }),
//                  circuitBreaker(all but throttled, { ConsecutiveBreaker(5),
//                  halfOpenAfter: ExponentialBackoff{ 15 s .. 120 s, no
//                  jitter } }), timeout(10 s, Aggressive) [per attempt]).
//                  Differences, all making cockatiel's arm lighter, not
//                  heavier: nres's breaker also trips on a failure ratio
//                  (0.5 over 30 s, 20 calls) and on slow calls, needs 2
//                  half-open successes (cockatiel: 1 probe closes it), jitters
//                  the break by 10 %; nres honours Retry-After and the measured
//                  attempt ceiling (3 x p95); cockatiel does neither.
//   naive          a hand-written JS loop, 3 attempts, no delay
//                  (nresrun.naive(3)).
// An arm that fails reports the reason nres would: "attempts exhausted"
// (a retrying arm gave up), "failed" (empty), "deadline exceeded" (the 30 s
// timeout), "circuit open" (a rejection, like nres's).
//
// Dependencies: kind "model" as dep.lua; kind "fn" by name only (a Lua
// function cannot cross the process boundary): see FN_DEPENDENCIES. A
// dependency error is a preallocated Error thrown each time (as dep.lua
// returns a constant string), so no arm pays for stack traces.
// Kind "http" (nresrun.dep.http) is the same dependency server the nres cells
// use, in a child process: the runner puts its argv in spec.server
// (`nresrun serve --port 0`); the peer starts it (stdin a pipe, first
// stdout line "port N", `--flaky-every N` added from the dependency),
// GETs /reset before the cell, reads /stats at the window's start and end
// for the requests the server counted (as cell.lua), and always stops it:
// stdin closed, then SIGTERM, then SIGKILL (if node itself dies, the
// closed pipe stops the server). Requests go through Node's http module
// with a keep-alive Agent (maxSockets = workers); a 2xx response (body
// read) is a success, anything else - 503, 429 (throttled), a socket error
// or a reset mid-response - a failure the policies handle. Policy arms
// pass cockatiel's AbortSignal to the request, as cockatiel's docs do, so
// its timeouts cancel the request.
//
// Memory: gc_bytes_per_op is the V8 heap allocation per operation over the
// window: (used heap at the end - used heap at the start) + the bytes every
// garbage collection in between freed (v8.GCProfiler reports used heap
// before and after each one). Checked against a known allocation (a
// two-field object costs 40 B on x64 without pointer compression). It
// counts everything the process allocates in the window - cockatiel, the
// load loop's promises, the dependency model's sleeps - the same for every
// JS arm, as nres's GC bytes/op count the Lua cell's own allocations too.
// GC pauses: gc_pause_share is the share of the window spent in garbage
// collection, from perf_hooks' 'gc' entries (PerformanceObserver): the
// part of each collection's [startTime, startTime + duration] inside the
// window, summed, over the window; with gc_collections and gc_pause_max_us.
// The nres cells report the same fields for their Lua states (cell.lua).
// heap_bytes_per_op (nres: the C runtime's malloc through its counting
// allocator) is null: cockatiel has no native heap of its own to count.
// Randomness: the dependency model draws from a seeded PRNG; cockatiel's
// jitter uses Math.random (it cannot be seeded).
import { performance, PerformanceObserver } from 'node:perf_hooks';
import v8 from 'node:v8';
import fs from 'node:fs';
import path from 'node:path';
import http from 'node:http';
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { setMaxListeners } from 'node:events';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SELF = fileURLToPath(import.meta.url);

class SpecError extends Error {}

// ---------------------------------------------------------------- cockatiel

let C = null;      // the cockatiel module, loaded on first use
let C_VERSION = null;

async function loadCockatiel() {
  if (C) return;
  // cockatiel's shared never-aborted signal gets one abort listener per
  // call in flight under a timeout (removed when the call ends); Node warns
  // past 10. Lift the default before cockatiel creates that signal.
  setMaxListeners(0);
  try {
    C = await import('cockatiel');
  } catch (e) {
    throw new SpecError(`cannot load cockatiel (${e.code || e.message}): install it with ` +
      `\`npm ci --prefix ${path.relative(process.cwd(), HERE) || '.'}\``);
  }
  try {
    C_VERSION = JSON.parse(fs.readFileSync(path.join(HERE, 'node_modules/cockatiel/package.json'), 'utf8')).version;
  } catch {
    C_VERSION = 'unknown';
  }
}

// ----------------------------------------------------------------- the clock

const now = () => performance.now() * 1e6;   // ns, double, monotonic

// Block the thread for ns (sub-millisecond): the analogue of the Lua
// scheduler's nanosleep. Only used for waits shorter than 2 ms, so a
// cockatiel timer (1 ms granularity) is delayed by less than its own slack.
const blocker = new Int32Array(new SharedArrayBuffer(4));
function blockNs(ns) {
  if (ns > 0) Atomics.wait(blocker, 0, 0, ns / 1e6);
}

// ------------------------------------------------------------- randomness

// mulberry32: a small seedable generator for the dependency model.
function prng(seed) {
  let a = (Math.floor(Math.abs(seed)) % 4294967296) >>> 0;
  a = (a ^ 0x9e3779b9) >>> 0;
  return function random() {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// ------------------------------------------------- histogram (as estimator.c)

const BUCKETS = 608;
const LAST_BUCKET = BUCKETS - 1;
const UINT64_MAX = 18446744073709551615;

function histIndex(value) {
  let v = Math.floor(value);
  if (!(v >= 0)) v = 0;
  if (v < 16) return v;
  let e = Math.floor(Math.log2(v));
  if (2 ** e > v) e--;
  else if (2 ** (e + 1) <= v) e++;
  const index = (e - 3) * 16 + (Math.floor(v / 2 ** (e - 4)) & 15);
  return index < LAST_BUCKET ? index : LAST_BUCKET;
}

function histUpper(index) {
  if (index < 16) return index;
  if (index >= LAST_BUCKET) return UINT64_MAX;
  const shift = (index >> 4) - 1;
  return (16 + (index & 15)) * 2 ** shift + 2 ** shift - 1;
}

function quantile(hist, total, q) {
  if (total === 0) return 0;
  const rank = Math.max(1, Math.ceil(q * total));
  let seen = 0;
  for (let i = 0; i < BUCKETS; i++) {
    seen += hist[i];
    if (seen >= rank) return histUpper(i);
  }
  return histUpper(LAST_BUCKET);
}

// ------------------------------------------------------------- the scheduler

// Dependency latency: a binary heap of (wake-up ns, resolve). The pump fires
// due sleeps and, in the open loop, due arrivals; it re-arms itself with a
// Node timer for waits over 2 ms (waking 1 ms early) and blocks the thread
// (Atomics.wait, sub-ms) for shorter ones - as sched.lua and cell.lua sleep
// the thread. Between two turns of the pump the event loop runs once
// (setImmediate), so completions and cockatiel's own timers run between
// arrivals.
const COARSE_NS = 2e6;

function makeScheduler() {
  const at = [];
  const fn = [];
  let n = 0;
  let immediate = null, timer = null, timerAt = Infinity;
  let pacer = null;   // { next(): ns, step(t) } in the open loop

  function push(when, resolve) {
    let i = n++;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (at[parent] <= when) break;
      at[i] = at[parent]; fn[i] = fn[parent];
      i = parent;
    }
    at[i] = when; fn[i] = resolve;
  }

  function pop() {
    const top = fn[0];
    n--;
    const lastAt = at[n], lastFn = fn[n];
    fn[n] = null;   // keep the arrays' size: shrinking them reallocates
    if (n > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= n) break;
        const r = l + 1;
        const c = (r < n && at[r] < at[l]) ? r : l;
        if (at[c] >= lastAt) break;
        at[i] = at[c]; fn[i] = fn[c];
        i = c;
      }
      at[i] = lastAt; fn[i] = lastFn;
    }
    return top;
  }

  function nextWake() {
    let w = n > 0 ? at[0] : Infinity;
    if (pacer) {
      const d = pacer.next();
      if (d < w) w = d;
    }
    return w;
  }

  function arm(w) {
    if (w === Infinity || immediate) return;
    const delta = w - now();
    if (delta > COARSE_NS) {
      if (timer && timerAt <= w) return;
      if (timer) clearTimeout(timer);
      timer = setTimeout(pump, Math.max(1, Math.floor((delta - 1e6) / 1e6)));
      timerAt = w;
    } else {
      if (timer) { clearTimeout(timer); timer = null; timerAt = Infinity; }
      immediate = setImmediate(pump);
    }
  }

  function pump() {
    immediate = null; timer = null; timerAt = Infinity;
    let t = now();
    const w = nextWake();
    if (w === Infinity) return;
    const delta = w - t;
    if (delta > COARSE_NS) { arm(w); return; }
    // Block to the wake-up, and do not spin: in Node 20 every clock read
    // (performance.now) allocates an array and every turn of the event
    // loop an Immediate, so spinning (cell.lua spins its last 100 µs) would
    // add allocation in proportion to idle time to every operation. The
    // price: a futex wait overshoots by the kernel's timer slack (~60-90 µs
    // here), which shows as pacer lag (reported) and in open-loop latency.
    if (delta > 0) { blockNs(delta); t = now(); }
    while (n > 0 && at[0] <= t) pop()(true);
    if (pacer) pacer.step(t);
    arm(nextWake());
  }

  return {
    sleep(ns) {
      return new Promise(resolve => {
        const when = now() + ns;
        push(when, resolve);
        arm(when);
      });
    },
    setPacer(p) { pacer = p; arm(nextWake()); },
    kick() { arm(nextWake()); },
  };
}

// Wait for ms of real time on the event loop (cleanup deadlines).
const waitMs = ms => new Promise(resolve => setTimeout(resolve, Math.max(0, ms)));
const yieldTurn = () => new Promise(resolve => setImmediate(resolve));

// -------------------------------------------------------------- dependencies

function depError(message, throttled, retryAfter) {
  const e = new Error(message);
  e.name = 'DependencyError';
  e.throttled = throttled;
  e.retryAfter = retryAfter;
  return e;
}

// Dependencies made with nresrun.dep.fn, known by name.
const FN_DEPENDENCIES = {
  'fails twice': {
    what: 'two of every three calls fail, by one shared counter (fails twice, then succeeds)',
    make(inst, unavailable) {
      let calls = 0;
      return function call() {
        calls++;
        inst.requests = calls;
        if (calls % 3 !== 0) throw unavailable;
        return true;
      };
    },
  },
};

function latencyFn(l, random) {
  if (!l) return null;
  const k = Object.keys(l)[0];
  const v = l[k];
  if (k === 'fixed') {
    const ns = v * 1e9;
    return () => ns;
  }
  if (k === 'uniform') {
    const lo = v[0] * 1e9, span = (v[1] - v[0]) * 1e9;
    return () => lo + span * random();
  }
  const median = v[0] * 1e9, sigma = v[1];
  const gauss = () => {
    let u1 = random();
    if (u1 < 1e-300) u1 = 1e-300;
    return Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * random());
  };
  return () => median * Math.exp(sigma * gauss());
}

// { call(n) -> true | Promise<true>, throws / rejects with a DependencyError;
//   requests: the count the dependency itself sees }.
function makeDependency(spec, random, sleep, clockSeconds) {
  const inst = { requests: 0, call: null };
  const unavailable = depError(spec.error ?? 'unavailable', false, 0);
  if (spec.kind === 'fn') {
    inst.call = FN_DEPENDENCIES[spec.name].make(inst, unavailable);
    return inst;
  }
  const throttled = depError('throttled', true, spec.retry_after ?? 0);
  const failEvery = spec.fail_every ?? 0;
  const failProb = spec.fail_prob ?? -1;
  const throttleEvery = spec.throttle_every ?? 0;
  const latency = latencyFn(spec.latency, random);
  const phases = Array.isArray(spec.phases) && spec.phases.length > 0 ? spec.phases : null;
  let count = 0;

  // After the latency, on the shared count as it is then (as dep.lua).
  function decide(fail) {
    if (fail) throw unavailable;
    if (throttleEvery && count % throttleEvery === 0) throw throttled;
    if (failEvery && count % failEvery === 0) throw unavailable;
    if (failProb >= 0 && random() < failProb) throw unavailable;
    return true;
  }
  async function slow(ns, fail) {
    await sleep(ns);
    return decide(fail);
  }
  inst.call = function call() {
    count++;
    inst.requests = count;
    let fail = false, factor = 1;
    if (phases) {
      const t = clockSeconds();
      for (let i = 0; i < phases.length; i++) {
        const ph = phases[i];
        if (t >= (ph.from ?? 0) && t < ph.to) {
          if (ph.fail && random() < ph.fail) fail = true;
          if (ph.latency_factor !== undefined) factor = ph.latency_factor;
        }
      }
    }
    if (latency) {
      const ns = latency() * factor;
      if (ns > 0) return slow(ns, fail);
    }
    return decide(fail);
  };
  return inst;
}

// ---------------------------------------------------- the http dependency

const SERVER_START_MS = 5000;
const SERVER_GET_MS = 5000;

// Start the dependency server: resolves { child, port, pid, exited } once
// it printed "port N"; rejects (the child stopped) otherwise.
function startServer(argv, flakyEvery) {
  const args = argv.slice(1);
  if (flakyEvery !== undefined) args.push('--flaky-every', String(flakyEvery));
  const what = `the dependency server (${[argv[0], ...args].join(' ')})`;
  const child = spawn(argv[0], args, { stdio: ['pipe', 'pipe', 'inherit'] });
  const srv = { child, port: 0, pid: child.pid, exited: false, exit: null, what };
  srv.exit = new Promise(resolve => {
    child.once('exit', () => { srv.exited = true; resolve(); });
    child.once('error', () => { if (!child.pid) { srv.exited = true; resolve(); } });
  });
  child.stdin.on('error', () => {});   // EPIPE once it is gone
  // Belt and braces: process.exit() skips nothing registered here.
  const onExit = () => { if (!srv.exited) { try { child.kill('SIGKILL'); } catch { /* gone */ } } };
  process.on('exit', onExit);
  srv.exit.then(() => process.off('exit', onExit));
  return new Promise((resolve, reject) => {
    let buf = '';
    let settled = false;
    const fail = why => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      stopServer(srv).finally(() => reject(new Error(`${what} ${why}`)));
    };
    const timer = setTimeout(() => fail(`did not print "port N" within ${SERVER_START_MS / 1000} s`), SERVER_START_MS);
    child.stdout.on('data', chunk => {   // keeps reading: a full pipe must not block it
      if (settled) return;
      buf += chunk;
      const nl = buf.indexOf('\n');
      if (nl < 0) { if (buf.length > 256) fail(`printed ${JSON.stringify(buf.slice(0, 80))}... instead of "port N"`); return; }
      const m = /^port (\d+)\s*$/.exec(buf.slice(0, nl));
      const port = m ? Number(m[1]) : 0;
      if (!(port > 0 && port < 65536)) { fail(`printed ${JSON.stringify(buf.slice(0, nl))} instead of "port N"`); return; }
      settled = true;
      clearTimeout(timer);
      srv.port = port;
      resolve(srv);
    });
    child.once('error', e => fail(`could not start (${e.code || e.message})`));
    child.once('exit', (code, sig) => fail(`exited before printing its port (${sig || `status ${code}`})`));
  });
}

// Stop it: close stdin (it stops at end of input), then SIGTERM, then
// SIGKILL, as nres_host_server_stop. Resolves true once it is reaped.
async function stopServer(srv) {
  const waitExit = ms => Promise.race([srv.exit, waitMs(ms)]);
  if (srv.exited) return true;
  srv.child.stdin.end();
  await waitExit(2000);
  for (const sig of ['SIGTERM', 'SIGKILL']) {
    if (srv.exited) break;
    try { srv.child.kill(sig); } catch { /* gone */ }
    await waitExit(sig === 'SIGTERM' ? 2000 : 5000);
  }
  return srv.exited;
}

// GET a control path on a connection of its own (not the Agent's).
function serverGet(port, p) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: p, agent: false, timeout: SERVER_GET_MS }, res => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', c => { body += c; });
      res.on('end', () => (res.statusCode === 200 ? resolve(body)
        : reject(new Error(`the dependency server's ${p} answered ${res.statusCode}`))));
      res.on('error', e => reject(new Error(`the dependency server's ${p} failed (${e.code || e.message})`)));
    });
    req.on('timeout', () => req.destroy(new Error('no answer within 5 s')));
    req.on('error', e => reject(new Error(`the dependency server's ${p} failed (${e.code || e.message})`)));
  });
}

// Requests the server has counted (/stats and /reset are not counted).
async function serverRequests(port) {
  const body = await serverGet(port, '/stats');
  let n;
  try { n = JSON.parse(body).requests; } catch { n = undefined; }
  if (!isInt(n)) throw new Error(`the dependency server's /stats has no "requests" count: ${body.slice(0, 200)}`);
  return n;
}

// { call(n, signal) -> Promise<true>, rejects with a DependencyError;
//   sent, connects: the client's own counts; agent }.
function makeHttpDependency(d, port, maxSockets) {
  const agent = new http.Agent({ keepAlive: true, maxSockets });
  const inst = { requests: 0, sent: 0, connects: 0, agent, call: null };
  const createConnection = agent.createConnection;
  agent.createConnection = function countedConnection(...a) {
    inst.connects++;
    return createConnection.apply(this, a);
  };
  const failed = depError('unavailable', false, 0);           // a status not 2xx
  const throttled = depError('throttled', true, 0);           // 429
  const broken = depError('connection failed', false, 0);     // socket error, reset
  const options = { agent, host: '127.0.0.1', port, path: d.path, method: d.method ?? 'GET' };
  inst.call = function call(n, signal) {
    inst.sent++;
    return new Promise((resolve, reject) => {
      const req = http.request(signal ? { ...options, signal } : options, res => {
        const status = res.statusCode;
        res.on('end', () => {
          if (status >= 200 && status < 300) resolve(true);
          else reject(status === 429 ? throttled : failed);
        });
        res.on('error', () => reject(broken));
        res.on('close', () => { if (!res.complete) reject(broken); });
        res.resume();   // read the body: the socket goes back to the pool
      });
      req.on('error', () => reject(broken));
      req.end();
    });
  };
  return inst;
}

// -------------------------------------------------------------------- arms

const ARMS = ['empty', 'passthrough', 'retry', 'retry-timeout', 'default', 'naive'];
const DEADLINE_MS = 30000;
const ATTEMPT_TIMEOUT_MS = 10000;
const NAIVE_ATTEMPTS = 3;

const OK = '';
const EXHAUSTED = 'attempts exhausted';

function buildPolicy(arm) {
  const {
    noop, retry, timeout, wrap, circuitBreaker, handleAll, handleWhen, TimeoutStrategy,
    ExponentialBackoff, ConsecutiveBreaker, fullJitterGenerator, noJitterGenerator,
    isBrokenCircuitError,
  } = C;
  switch (arm) {
    case 'passthrough':
      return noop;
    case 'retry':
      return retry(handleAll, { maxAttempts: NAIVE_ATTEMPTS - 1 });
    case 'retry-timeout':
      return wrap(retry(handleAll, { maxAttempts: NAIVE_ATTEMPTS - 1 }),
        timeout(ATTEMPT_TIMEOUT_MS, TimeoutStrategy.Aggressive));
    case 'default':
      return wrap(
        timeout(DEADLINE_MS, TimeoutStrategy.Aggressive),
        retry(handleWhen(e => !isBrokenCircuitError(e)), {
          maxAttempts: NAIVE_ATTEMPTS - 1,
          backoff: new ExponentialBackoff({
            initialDelay: 100, exponent: 2, maxDelay: 30000, generator: fullJitterGenerator,
          }),
        }),
        circuitBreaker(handleWhen(e => !(e && e.throttled === true)), {
          halfOpenAfter: new ExponentialBackoff({
            initialDelay: 15000, exponent: 2, maxDelay: 120000, generator: noJitterGenerator,
          }),
          breaker: new ConsecutiveBreaker(5),
        }),
        timeout(ATTEMPT_TIMEOUT_MS, TimeoutStrategy.Aggressive));
    default:
      throw new SpecError(`arm: unknown arm ${JSON.stringify(arm)}`);
  }
}

// op(n) -> a reason ('' = success), or a Promise of one. `counters` holds
// attempts and retries (the policy's own view, as nres's telemetry).
function makeOp(arm, dep, counters) {
  const call = dep.call;
  const RAW_OK = () => OK;
  const RAW_FAIL = () => 'failed';

  if (arm === 'empty') {
    return function rawOp(n) {
      counters.attempts++;
      let v;
      try { v = call(n); } catch { return 'failed'; }
      if (v instanceof Promise) return v.then(RAW_OK, RAW_FAIL);
      return OK;
    };
  }

  if (arm === 'naive') {
    const REJECTED = Promise.reject(new Error('sync failure'));
    REJECTED.catch(() => {});
    async function naiveAsync(n, v, a) {
      for (;;) {
        let ok = true;
        try { await v; } catch { ok = false; }
        if (ok) return OK;
        if (++a >= NAIVE_ATTEMPTS) return EXHAUSTED;
        counters.attempts++; counters.retries++;
        try { v = call(n); } catch { v = REJECTED; }
      }
    }
    return function naiveOp(n) {
      for (let a = 0; a < NAIVE_ATTEMPTS; a++) {
        counters.attempts++;
        if (a > 0) counters.retries++;
        let v;
        try { v = call(n); } catch { continue; }
        if (v instanceof Promise) return naiveAsync(n, v, a);
        return OK;
      }
      return EXHAUSTED;
    };
  }

  const policy = buildPolicy(arm);
  const { isBrokenCircuitError, isBulkheadRejectedError, isTaskCancelledError } = C;
  const deadlineMessage = `${DEADLINE_MS}ms`;
  // The attempt cockatiel runs: the context carries the retry number.
  const attempt = ctx => {
    counters.attempts++;
    if (ctx.attempt > 0) counters.retries++;
    return call(0, ctx.signal);
  };
  const classify = e => {
    if (isBrokenCircuitError(e)) return 'circuit open';
    if (isBulkheadRejectedError(e)) return 'rate limited';
    if (isTaskCancelledError(e)) {
      return arm === 'default' && String(e.message).endsWith(deadlineMessage) ? 'deadline exceeded' : EXHAUSTED;
    }
    if (e && e.name === 'DependencyError') return EXHAUSTED;
    counters.unexpected ??= String(e && e.stack || e);
    return 'unexpected error';
  };
  return function policyOp() {
    return policy.execute(attempt).then(RAW_OK, classify);
  };
}

// -------------------------------------------------------------------- spec

const SPEC_FIELDS = ['arm', 'dependency', 'workers', 'rate', 'warmup', 'window', 'seed', 'max_inflight', 'server'];
const HTTP_FIELDS = ['kind', 'where', 'name', 'path', 'method', 'idempotent', 'flaky_every'];
const MODEL_FIELDS = ['kind', 'where', 'name', 'fail_every', 'fail_prob', 'throttle_every',
  'retry_after', 'error', 'latency', 'phases'];

const isNum = v => typeof v === 'number' && Number.isFinite(v);
const isInt = v => Number.isInteger(v);
const show = v => (v === undefined ? 'nothing' : JSON.stringify(v));

function checkSpec(spec) {
  const problems = [];
  const bad = (field, expected, got) => problems.push(`${field}: expected ${expected}, got ${show(got)}`);
  if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) {
    throw new SpecError(`the cell spec: expected a JSON object, got ${show(spec)}`);
  }
  for (const k of Object.keys(spec)) {
    if (!SPEC_FIELDS.includes(k)) problems.push(`${k}: unknown field (${SPEC_FIELDS.join(', ')})`);
  }
  if (!ARMS.includes(spec.arm)) bad('arm', `one of ${ARMS.join(', ')}`, spec.arm);
  const hasWorkers = spec.workers !== undefined && spec.workers !== null;
  const hasRate = spec.rate !== undefined && spec.rate !== null;
  if (hasWorkers === hasRate) {
    problems.push('workers/rate: expected one of workers (closed loop) or rate (open loop)');
  } else if (hasWorkers && !(isInt(spec.workers) && spec.workers >= 1 && spec.workers <= 100000)) {
    bad('workers', 'an integer in [1, 100000]', spec.workers);
  } else if (hasRate && !(isNum(spec.rate) && spec.rate > 0 && spec.rate <= 2e6)) {
    bad('rate', 'operations per second in (0, 2000000]', spec.rate);
  }
  if (!(isNum(spec.warmup) && spec.warmup >= 0 && spec.warmup < 3600)) bad('warmup', 'seconds >= 0', spec.warmup);
  if (!(isNum(spec.window) && spec.window > 0 && spec.window < 3600)) bad('window', 'seconds > 0', spec.window);
  if (spec.seed !== undefined && !isNum(spec.seed)) bad('seed', 'a number', spec.seed);
  if (spec.max_inflight !== undefined && !(isInt(spec.max_inflight) && spec.max_inflight >= 1)) {
    bad('max_inflight', 'an integer >= 1', spec.max_inflight);
  }
  checkDependency(problems, spec.dependency);
  const isHttp = spec.dependency && spec.dependency.kind === 'http';
  if (isHttp && spec.server === undefined) {
    problems.push('server: missing: an http dependency needs the dependency server\'s argv ' +
      '(nresrun\'s runner adds ["<nresrun>", "serve", "--port", "0"])');
  } else if (spec.server !== undefined && !(Array.isArray(spec.server) && spec.server.length >= 1 &&
      spec.server.every(a => typeof a === 'string' && a.length > 0))) {
    bad('server', 'the argv of the dependency server, a list of strings', spec.server);
  } else if (spec.server !== undefined && !isHttp) {
    problems.push('server: only with an http dependency');
  }
  if (problems.length > 0) {
    throw new SpecError(problems.length === 1 ? problems[0]
      : `${problems.length} problems:\n  ${problems.join('\n  ')}`);
  }
}

function checkDependency(problems, d) {
  const bad = (field, expected, got) => problems.push(`dependency.${field}: expected ${expected}, got ${show(got)}`);
  if (d === null || typeof d !== 'object' || Array.isArray(d)) {
    problems.push(`dependency: expected an object, got ${show(d)}`);
    return;
  }
  if (d.kind === 'fn') {
    if (!Object.prototype.hasOwnProperty.call(FN_DEPENDENCIES, d.name)) {
      const known = Object.entries(FN_DEPENDENCIES).map(([k, v]) => `"${k}" (${v.what})`).join(', ');
      problems.push(`dependency: a Lua function dependency (nresrun.dep.fn) cannot cross to node; the peer ` +
        `knows these by their name: ${known}; got name ${show(d.name)}` +
        (d.where ? ` (the dependency written at ${d.where})` : ''));
    }
    return;
  }
  if (d.kind === 'http') {
    for (const k of Object.keys(d)) {
      if (!HTTP_FIELDS.includes(k)) problems.push(`dependency.${k}: unknown field for an http dependency (${HTTP_FIELDS.join(', ')})`);
    }
    if (!(typeof d.path === 'string' && /^\/[\w\-.~!$&'()*+,;=:@/%?]*$/.test(d.path) && d.path.length <= 1024)) {
      bad('path', 'a path starting with "/" (e.g. "/echo", "/flaky?n=4")', d.path);
    }
    if (d.method !== undefined && !(typeof d.method === 'string' && /^[\w!#$%&'*+.^`|~-]{1,16}$/.test(d.method))) {
      bad('method', 'an HTTP method token', d.method);
    }
    if (d.idempotent !== undefined && typeof d.idempotent !== 'boolean') bad('idempotent', 'a boolean', d.idempotent);
    if (d.flaky_every !== undefined && !(isInt(d.flaky_every) && d.flaky_every >= 1)) bad('flaky_every', 'an integer >= 1', d.flaky_every);
    if (d.name !== undefined && typeof d.name !== 'string') bad('name', 'a string', d.name);
    return;
  }
  if (d.kind !== 'model') {
    bad('kind', '"model", "fn" or "http"', d.kind);
    return;
  }
  for (const k of Object.keys(d)) {
    if (!MODEL_FIELDS.includes(k)) problems.push(`dependency.${k}: unknown field for a model dependency`);
  }
  const intGe1 = v => isInt(v) && v >= 1;
  if (d.fail_every !== undefined && !intGe1(d.fail_every)) bad('fail_every', 'an integer >= 1', d.fail_every);
  if (d.throttle_every !== undefined && !intGe1(d.throttle_every)) bad('throttle_every', 'an integer >= 1', d.throttle_every);
  if (d.fail_prob !== undefined && !(isNum(d.fail_prob) && d.fail_prob >= 0 && d.fail_prob <= 1)) {
    bad('fail_prob', 'a probability in [0, 1]', d.fail_prob);
  }
  if (d.fail_every !== undefined && d.fail_prob !== undefined) {
    problems.push('dependency: fail_every and fail_prob are two failure models; choose one');
  }
  if (d.retry_after !== undefined && !(isNum(d.retry_after) && d.retry_after >= 0)) bad('retry_after', 'seconds >= 0', d.retry_after);
  if (d.error !== undefined && typeof d.error !== 'string') bad('error', 'a string', d.error);
  if (d.name !== undefined && typeof d.name !== 'string') bad('name', 'a string', d.name);
  if (d.latency !== undefined) {
    const l = d.latency;
    const keys = l && typeof l === 'object' && !Array.isArray(l) ? Object.keys(l) : null;
    const pair = v => Array.isArray(v) && v.length === 2 && isNum(v[0]) && isNum(v[1]);
    if (!keys || keys.length !== 1) {
      bad('latency', 'exactly one of { fixed }, { uniform }, { lognormal }', l);
    } else if (keys[0] === 'fixed') {
      if (!(isNum(l.fixed) && l.fixed >= 0)) bad('latency.fixed', 'seconds >= 0', l.fixed);
    } else if (keys[0] === 'uniform') {
      if (!(pair(l.uniform) && l.uniform[0] >= 0 && l.uniform[1] >= l.uniform[0])) {
        bad('latency.uniform', '[low, high] in seconds, 0 <= low <= high', l.uniform);
      }
    } else if (keys[0] === 'lognormal') {
      if (!(pair(l.lognormal) && l.lognormal[0] > 0 && l.lognormal[1] >= 0)) {
        bad('latency.lognormal', '[median seconds > 0, sigma >= 0]', l.lognormal);
      }
    } else {
      problems.push(`dependency.latency.${keys[0]}: unknown latency kind (fixed, uniform, lognormal)`);
    }
  }
  if (d.phases !== undefined) {
    // cjson encodes an empty Lua table as {}: that is no phases.
    const empty = d.phases && typeof d.phases === 'object' && !Array.isArray(d.phases) && Object.keys(d.phases).length === 0;
    if (!empty && !Array.isArray(d.phases)) {
      bad('phases', 'a list of { from, to, fail, latency_factor }', d.phases);
    } else if (!empty) {
      d.phases.forEach((ph, i) => {
        const at = `phases[${i + 1}]`;
        if (ph === null || typeof ph !== 'object' || Array.isArray(ph)) { bad(at, 'an object', ph); return; }
        for (const [k, v] of Object.entries(ph)) {
          const ok = { from: x => isNum(x) && x >= 0, to: x => isNum(x) && x > 0,
            fail: x => isNum(x) && x >= 0 && x <= 1, latency_factor: x => isNum(x) && x >= 0 }[k];
          if (!ok) problems.push(`dependency.${at}.${k}: unknown field (from, to, fail, latency_factor)`);
          else if (!ok(v)) problems.push(`dependency.${at}.${k}: got ${show(v)}`);
        }
        if (!isNum(ph.to)) problems.push(`dependency.${at}.to: missing (seconds since the cell started)`);
        else if (isNum(ph.from) && ph.to <= ph.from) problems.push(`dependency.${at}: to (${ph.to}) must be after from (${ph.from})`);
      });
    }
  }
}

// -------------------------------------------------------------------- cell

const MISSED_NS = 1e6;
const REJECTIONS = new Set(['circuit open', 'budget exhausted', 'rate limited', 'draining']);
const DRAIN_NS = 10e9;

// Run the cell; an http dependency's server lives exactly as long as this
// call, whatever happens in the cell.
async function runCell(spec) {
  checkSpec(spec);
  if (!['empty', 'naive'].includes(spec.arm)) await loadCockatiel();
  if (spec.dependency.kind !== 'http') return runCellWith(spec, null);
  const srv = await startServer(spec.server, spec.dependency.flaky_every);
  let out, failure = null;
  try {
    await serverGet(srv.port, '/reset');
    out = await runCellWith(spec, srv);
  } catch (e) {
    failure = e;
  }
  const stopped = await stopServer(srv);
  if (failure) throw failure;
  if (!stopped) throw new Error(`${srv.what}, pid ${srv.pid}, could not be stopped`);
  out.dependency_pid = srv.pid;
  return out;
}

async function runCellWith(spec, srv) {
  const random = prng(spec.seed ?? 1);
  const sched = makeScheduler();
  const t0 = now();
  const measureAt = t0 + spec.warmup * 1e9;
  const stopAt = measureAt + spec.window * 1e9;
  const dep = srv
    ? makeHttpDependency(spec.dependency, srv.port, spec.workers ?? Math.min(spec.max_inflight ?? 200, 200))
    : makeDependency(spec.dependency, random, ns => sched.sleep(ns), () => (now() - t0) / 1e9);
  const counters = { attempts: 0, retries: 0, unexpected: undefined };
  const op = makeOp(spec.arm, dep, counters);

  const hist = new Uint32Array(BUCKETS);
  const m = { arrivals: 0, successes: 0, failures: 0, rejections: 0, shed: 0, missed: 0,
    lagMax: 0, lagSum: 0, maxNs: 0 };
  const failedBy = {}, rejectedBy = {};
  let base = null;   // counters at the start of the window
  let profiler = null;
  const gcEntries = [];
  const gcObserver = new PerformanceObserver(list => { for (const e of list.getEntries()) gcEntries.push(e); });
  gcObserver.observe({ entryTypes: ['gc'] });

  function snapshot() {
    base = { requests: dep.requests, attempts: counters.attempts, retries: counters.retries,
      sent: dep.sent, requestsP: null, used: v8.getHeapStatistics().used_heap_size };
    if (srv) {
      // The server's count at the window's start (its allocation, once per
      // cell, is in the window's GC bytes: a few kB over thousands of ops).
      base.requestsP = serverRequests(srv.port);
      base.requestsP.catch(() => {});
    }
    profiler = new v8.GCProfiler();
    profiler.start();
  }

  function record(started, ended, reason) {
    if (started < measureAt) return;
    if (base === null) snapshot();
    m.arrivals++;
    if (reason === OK) {
      m.successes++;
    } else if (REJECTIONS.has(reason)) {
      m.rejections++;
      rejectedBy[reason] = (rejectedBy[reason] || 0) + 1;
    } else {
      m.failures++;
      failedBy[reason] = (failedBy[reason] || 0) + 1;
    }
    let ns = ended - started;
    if (ns < 0) ns = 0;
    if (ns > m.maxNs) m.maxNs = ns;
    hist[histIndex(ns)]++;
  }

  if (spec.workers) {
    const workers = spec.workers;
    async function worker() {
      let n = 0;
      for (;;) {
        const t = now();
        if (t >= stopAt) return;
        let r = op(n);
        if (typeof r !== 'string') r = await r;
        record(t, now(), r);
        n++;
        if (workers > 1 && (n & 63) === 0) await yieldTurn();
      }
    }
    const all = [];
    for (let k = 0; k < workers; k++) all.push(worker());
    // Let the calls in flight finish, for at most DRAIN_NS after the window.
    await Promise.race([Promise.all(all), waitMs((stopAt + DRAIN_NS - now()) / 1e6)]);
  } else {
    const interval = 1e9 / spec.rate;
    const maxInflight = spec.max_inflight ?? 10000;
    let i = 0, inflight = 0, pacing = true;
    let drained = null;
    const drainedP = new Promise(resolve => { drained = resolve; });

    function finish(scheduled, reason) {
      record(scheduled, now(), reason);
      inflight--;
      if (!pacing && inflight === 0) drained();
    }
    async function slowArrival(scheduled, p) {
      finish(scheduled, await p);
    }
    // Start arrivals that are due, at most 64 per turn so completions run.
    function step(t) {
      for (let issued = 0; pacing && issued < 64; issued++) {
        const dueAt = t0 + i * interval;
        if (dueAt >= stopAt) {
          pacing = false;
          sched.setPacer(null);
          if (inflight === 0) drained();
          return;
        }
        if (dueAt > t) return;
        const lag = t - dueAt;
        if (dueAt >= measureAt) {
          if (lag > MISSED_NS) m.missed++;
          if (lag > m.lagMax) m.lagMax = lag;
          m.lagSum += lag;
        }
        if (inflight < maxInflight) {
          inflight++;
          const r = op(i);
          if (typeof r === 'string') finish(dueAt, r);
          else slowArrival(dueAt, r);
        } else if (dueAt >= measureAt) {
          if (base === null) snapshot();
          m.shed++;
          m.arrivals++;
          m.rejections++;
          rejectedBy.shed = (rejectedBy.shed || 0) + 1;
        }
        i++;
        t = now();
      }
    }
    sched.setPacer({ next: () => (pacing ? t0 + i * interval : Infinity), step });
    await Promise.race([drainedP, waitMs((stopAt + DRAIN_NS - now()) / 1e6)]);
    if (pacing) {
      // Still starting arrivals 10 s after the window: the arm cannot keep
      // up with the rate. The window's arrivals not started yet had no
      // slot in time: shed (the cell is untrusted), so arrivals still
      // match the schedule.
      pacing = false;
      sched.setPacer(null);
      if (base === null) snapshot();
      for (; t0 + i * interval < stopAt; i++) {
        if (t0 + i * interval < measureAt) continue;
        m.shed++;
        m.arrivals++;
        m.rejections++;
        rejectedBy.shed = (rejectedBy.shed || 0) + 1;
      }
    }
    if (inflight > 0) {
      m.failures += inflight;
      m.arrivals += inflight;
      failedBy.unfinished = inflight;
    }
  }

  if (base === null) snapshot();
  const gc = profiler.stop();
  for (const e of gcObserver.takeRecords()) gcEntries.push(e);
  gcObserver.disconnect();
  // ns -> ms: now() is performance.now() in ns, the entries' clock.
  const winFrom = measureAt / 1e6, winTo = stopAt / 1e6;
  let gcMs = 0, gcMaxMs = 0, gcCount = 0;
  for (const e of gcEntries) {
    const a = Math.max(e.startTime, winFrom), b = Math.min(e.startTime + e.duration, winTo);
    if (b <= a) continue;
    gcMs += b - a;
    gcCount++;
    if (e.duration > gcMaxMs) gcMaxMs = e.duration;
  }
  let freed = 0;
  for (const s of gc.statistics) {
    freed += s.beforeGC.heapStatistics.usedHeapSize - s.afterGC.heapStatistics.usedHeapSize;
  }
  const allocated = v8.getHeapStatistics().used_heap_size - base.used + freed;
  let requests = dep.requests - base.requests;
  if (srv) {
    requests = await serverRequests(srv.port) - await base.requestsP;
    dep.agent.destroy();
  }

  const window = spec.window;
  const ops = m.arrivals - m.shed;
  const per = v => (ops > 0 ? v / ops : 0);
  const out = {
    ops_per_sec: (m.successes + m.failures + m.rejections - m.shed) / window,
    arrivals: m.arrivals, successes: m.successes, failures: m.failures,
    rejections: m.rejections, shed: m.shed, missed: m.missed,
    failed_by: failedBy, rejected_by: rejectedBy,
    p50_us: quantile(hist, ops, 0.5) / 1e3, p90_us: quantile(hist, ops, 0.9) / 1e3,
    p99_us: quantile(hist, ops, 0.99) / 1e3, max_us: m.maxNs / 1e3,
    dependency_requests_per_op: per(requests),
    attempts_per_op: per(counters.attempts - base.attempts),
    retries_per_op: per(counters.retries - base.retries),
    completion_ratio: m.arrivals > 0 ? m.successes / m.arrivals : 0,
    pacer_lag_max_us: m.lagMax / 1e3,
    pacer_lag_mean_us: m.arrivals > 0 && spec.rate ? m.lagSum / m.arrivals / 1e3 : 0,
    peak_rss_kb: process.resourceUsage().maxRSS,
    heap_bytes_per_op: null,
    gc_bytes_per_op: per(allocated),
    gc_count: gc.statistics.length,
    gc_pause_share: gcMs / (spec.window * 1e3), gc_collections: gcCount, gc_pause_max_us: gcMaxMs * 1e3,
    runtime: 'node', runtime_version: process.versions.node,
    peer: ['empty', 'naive'].includes(spec.arm) ? 'js' : 'cockatiel',
    peer_version: C_VERSION,
  };
  if (srv) {
    out.dependency_requests = requests;
    out.client_requests_per_op = per(dep.sent - base.sent);
    out.connections = dep.connects;
  }
  out.identity_ok = m.arrivals === m.successes + m.failures + m.rejections;
  out.trusted = out.identity_ok && m.shed === 0 &&
    (m.arrivals === 0 || m.missed <= 0.001 * m.arrivals) && ops > 0;
  if (counters.unexpected) process.stderr.write(`cockatiel peer: unexpected error from an arm: ${counters.unexpected}\n`);
  return out;
}

// --------------------------------------------------------------- self-test

const FIELDS = {
  number: ['ops_per_sec', 'p50_us', 'p90_us', 'p99_us', 'max_us', 'attempts_per_op', 'retries_per_op',
    'dependency_requests_per_op', 'completion_ratio', 'arrivals', 'successes', 'failures', 'rejections',
    'shed', 'missed', 'pacer_lag_max_us', 'pacer_lag_mean_us', 'peak_rss_kb', 'gc_bytes_per_op',
    'gc_pause_share', 'gc_collections', 'gc_pause_max_us'],
  nullable: ['heap_bytes_per_op'],
  boolean: ['trusted', 'identity_ok'],
  object: ['failed_by', 'rejected_by'],
};

// An nresrun that has `serve`: $NRESRUN, else the repository's build/.
function findServe() {
  for (const exe of [process.env.NRESRUN, path.join(HERE, '../../build/nresrun')]) {
    if (!exe || !fs.existsSync(exe)) continue;
    const r = spawnSync(exe, ['serve', '--help'], { encoding: 'utf8', timeout: 5000 });
    if (r.status === 0 && /--flaky-every/.test(`${r.stdout}${r.stderr}`)) return exe;
  }
  return null;
}

function runChild(spec) {
  const r = spawnSync(process.execPath, [SELF, typeof spec === 'string' ? spec : JSON.stringify(spec)],
    { encoding: 'utf8', timeout: 30000 });
  const lines = (r.stdout || '').split('\n').filter(l => l.startsWith('{'));
  let line = null;
  try { line = lines.length === 1 ? JSON.parse(lines[0]) : null; } catch { line = null; }
  return { status: r.status, stderr: r.stderr || '', stdoutLines: lines.length, line };
}

async function selfTest() {
  let failed = 0;
  const check = (cond, what) => {
    if (!cond) failed++;
    process.stdout.write(`${cond ? 'ok  ' : 'FAIL'} ${what}\n`);
  };
  const checkFields = (name, x) => {
    const missing = [];
    for (const [kind, names] of Object.entries(FIELDS)) {
      for (const f of names) {
        const v = x[f];
        const ok = kind === 'number' ? isNum(v) && v >= 0
          : kind === 'nullable' ? v === null || (isNum(v) && v >= 0)
            : kind === 'boolean' ? typeof v === 'boolean'
              : v !== null && typeof v === 'object' && !Array.isArray(v);
        if (!ok) missing.push(`${f}=${show(v)}`);
      }
    }
    check(missing.length === 0, `${name}: every field present with its type${missing.length ? ` (bad: ${missing.join(', ')})` : ''}`);
    check(x.identity_ok === true && x.arrivals === x.successes + x.failures + x.rejections,
      `${name}: arrivals = successes + failures + rejections (${x.arrivals} = ${x.successes} + ${x.failures} + ${x.rejections})`);
    check(x.p50_us <= x.p90_us && x.p90_us <= x.p99_us, `${name}: p50 <= p90 <= p99`);
  };
  const cell = (name, spec, verify) => {
    const r = runChild(spec);
    check(r.status === 0 && r.stdoutLines === 1 && r.line !== null,
      `${name}: exits 0 with one JSON line (status ${r.status}, ${r.stdoutLines} line(s))${r.status !== 0 ? ` stderr: ${r.stderr.slice(-500)}` : ''}`);
    if (r.line) { checkFields(name, r.line); verify(r.line); }
  };

  // 1. cockatiel retry, closed loop, one worker: "fails twice" takes
  //    exactly 3 attempts per operation, all complete - proves the mapping
  //    "3 attempts in all" (2 attempts would complete only half).
  cell('retry / fails twice / workers=1', {
    arm: 'retry', dependency: { kind: 'fn', name: 'fails twice' },
    workers: 1, warmup: 0.05, window: 0.3, seed: 7, max_inflight: 100,
  }, x => {
    check(x.arrivals > 10, `retry: ran operations (${x.arrivals})`);
    check(x.completion_ratio === 1 && x.failures === 0, `retry: every operation completed (${x.completion_ratio})`);
    check(Math.abs(x.attempts_per_op - 3) < 0.1 && Math.abs(x.retries_per_op - 2) < 0.1,
      `retry: 3 attempts, 2 retries per op (${x.attempts_per_op.toFixed(3)}, ${x.retries_per_op.toFixed(3)})`);
    check(Math.abs(x.dependency_requests_per_op - x.attempts_per_op) < 0.1,
      `retry: the dependency saw every attempt (${x.dependency_requests_per_op.toFixed(3)})`);
    check(x.p50_us >= 2000, `retry: two setTimeout(0) retries take >= 2 ms (p50 ${x.p50_us} µs)`);
    check(x.gc_bytes_per_op > 0, `retry: cockatiel's allocation is measured (${x.gc_bytes_per_op.toFixed(0)} B/op)`);
    check(x.peer === 'cockatiel' && typeof x.peer_version === 'string', `retry: names its peer (${x.peer} ${x.peer_version})`);
  });

  // 1b. cockatiel's noop policy, 10 workers, healthy: it allocates (~1 kB
  //     per operation), so the window holds collections, each timed from
  //     perf_hooks; GCProfiler sees the same collections, give or take the
  //     ones at the window's edges (it starts at the first outcome in the
  //     window and stops after the drain).
  cell('passthrough / healthy / workers=10', {
    arm: 'passthrough', dependency: { kind: 'model' },
    workers: 10, warmup: 0.05, window: 0.3, seed: 1,
  }, x => {
    check(x.gc_collections > 0 && x.gc_pause_share > 0 && x.gc_pause_share < 1,
      `passthrough: its collections are timed (${x.gc_collections}, ${(100 * x.gc_pause_share).toFixed(2)} % of the window)`);
    check(Math.abs(x.gc_count - x.gc_collections) <= Math.max(2, 0.1 * x.gc_collections),
      `passthrough: perf_hooks and GCProfiler agree (${x.gc_collections} and ${x.gc_count})`);
  });

  // 2. the JS raw arm, open loop at 2000/s for 0.4 s: exactly 800 arrivals
  //    on schedule, each at least the dependency's 1 ms.
  cell('empty / fixed 1 ms / rate=2000', {
    arm: 'empty', dependency: { kind: 'model', latency: { fixed: 0.001 } },
    rate: 2000, warmup: 0.1, window: 0.4, seed: 3, max_inflight: 10000,
  }, x => {
    check(x.arrivals === 800, `empty: 800 scheduled arrivals in the window (${x.arrivals})`);
    check(x.successes === 800 && x.shed === 0, `empty: all succeeded, none shed (${x.successes}, ${x.shed})`);
    check(x.p50_us >= 1000, `empty: latency counts the dependency's 1 ms (p50 ${x.p50_us} µs)`);
    check(Math.abs(x.dependency_requests_per_op - 1) < 0.01, `empty: one request per op (${x.dependency_requests_per_op})`);
    check(x.retries_per_op === 0, 'empty: no retries');
  });

  // 3. the default-like arm against a dependency that always fails: the
  //    breaker opens after 5 consecutive failures and rejects the rest, the
  //    retries waiting in backoff included (they end "circuit open", as in
  //    nres: a retry refused by the breaker is a rejection).
  cell('default / always fails / workers=4', {
    arm: 'default', dependency: { kind: 'model', fail_every: 1 },
    workers: 4, warmup: 0, window: 0.4, seed: 5,
  }, x => {
    check((x.rejected_by['circuit open'] || 0) > 0, `default: the breaker rejects (${JSON.stringify(x.rejected_by)})`);
    check(x.successes === 0 && x.dependency_requests_per_op < 0.01,
      `default: the open breaker spares the dependency (${x.dependency_requests_per_op} requests/op)`);
  });

  // 4. http: the retry arm against the dependency server's /flaky (503 on
  //    every 2nd request): the server's own count matches the attempts, the
  //    retries complete nearly every operation, keep-alive holds one
  //    connection per worker, and the server is gone afterwards. Needs an
  //    nresrun with `serve` (NRESRUN=path, else build/nresrun); skipped
  //    without one.
  const serve = findServe();
  if (!serve) {
    process.stdout.write('skip http cell: no nresrun with `serve` (set NRESRUN=/path/to/nresrun)\n');
  } else {
    cell('retry / http /flaky?n=2 / workers=2', {
      arm: 'retry', dependency: { kind: 'http', path: '/flaky?n=2' },
      server: [serve, 'serve', '--port', '0'], workers: 2, warmup: 0.1, window: 0.4, seed: 1,
    }, x => {
      check(x.arrivals > 20 && x.completion_ratio > 0.9,
        `http: ran and completed (${x.arrivals} ops, completion ${x.completion_ratio.toFixed(3)})`);
      check(x.dependency_requests_per_op > 1.2 && Math.abs(x.dependency_requests_per_op - x.attempts_per_op) < 0.05,
        `http: the server counted every attempt (${x.dependency_requests_per_op.toFixed(3)} vs ${x.attempts_per_op.toFixed(3)})`);
      check(x.connections >= 1 && x.connections <= 2, `http: keep-alive, one connection per worker at most (${x.connections})`);
      let gone = false;
      try { process.kill(x.dependency_pid, 0); } catch (e) { gone = e.code === 'ESRCH'; }
      check(gone, `http: the server (pid ${x.dependency_pid}) was stopped`);
    });
    const r = runChild({ arm: 'empty', dependency: { kind: 'http', path: '/echo' },
      server: ['/nonexistent/nresrun', 'serve'], workers: 1, warmup: 0, window: 0.1 });
    check(r.status === 1 && r.stdoutLines === 0 && r.stderr.includes('could not start'),
      `http: a server that cannot start fails the cell, naming it (status ${r.status}; ${r.stderr.trim().split('\n')[0]})`);
  }

  // 5. bad specs fail with exit 2 and a message naming what was wrong.
  const bad = (name, spec, needle) => {
    const r = runChild(spec);
    check(r.status === 2 && r.stdoutLines === 0 && r.stderr.includes(needle),
      `${name}: exit 2 naming ${JSON.stringify(needle)} (status ${r.status}; ${r.stderr.trim().split('\n')[0]})`);
  };
  const good = { arm: 'retry', dependency: { kind: 'model' }, workers: 1, warmup: 0, window: 0.1 };
  bad('unknown fn dependency', { ...good, dependency: { kind: 'fn', name: 'fails thrice' } }, '"fails twice"');
  bad('unknown arm', { ...good, arm: 'hedge' }, 'arm: expected one of');
  bad('bad latency', { ...good, dependency: { kind: 'model', latency: { lognormal: [0, 1] } } }, 'dependency.latency.lognormal');
  bad('both loops', { ...good, rate: 100 }, 'workers/rate');
  bad('not JSON', '{arm', 'not JSON');
  bad('http without server', { ...good, dependency: { kind: 'http', path: '/echo' } }, 'server: missing');
  bad('http bad path', { ...good, dependency: { kind: 'http', path: 'echo' }, server: ['x'] }, 'dependency.path');

  process.stdout.write(failed === 0 ? 'self-test: all passed\n' : `self-test: ${failed} failed\n`);
  return failed === 0 ? 0 : 1;
}

// -------------------------------------------------------------------- main

const USAGE = `usage: node bench/peers/cockatiel.js '<json cell spec>' | --self-test | --help
  spec: { "arm": ${ARMS.map(a => `"${a}"`).join(' | ')},
          "dependency": { "kind": "model", ... } | { "kind": "fn", "name": ${Object.keys(FN_DEPENDENCIES).map(k => `"${k}"`).join(' | ')} }
                      | { "kind": "http", "path": "/flaky?n=4", "method", "flaky_every" } with "server": [argv],
          "workers": N | "rate": ops/s, "warmup": s, "window": s, "seed": N, "max_inflight": N }
  prints one JSON line with the metrics of lua/nres/cell.lua. Exit: 0 ran, 1 failed, 2 bad spec.`;

async function main(argv) {
  if (argv.length !== 1) {
    process.stderr.write(`cockatiel peer: expected one argument\n${USAGE}\n`);
    return 2;
  }
  const arg = argv[0];
  if (arg === '--help' || arg === '-h') { process.stdout.write(`${USAGE}\n`); return 0; }
  if (arg === '--self-test') return selfTest();
  let spec;
  try {
    spec = JSON.parse(arg);
  } catch (e) {
    process.stderr.write(`cockatiel peer: the cell spec is not JSON (${e.message})\n`);
    return 2;
  }
  try {
    const out = await runCell(spec);
    fs.writeSync(1, `${JSON.stringify(out)}\n`);
    return 0;
  } catch (e) {
    if (e instanceof SpecError) {
      process.stderr.write(`cockatiel peer: ${e.message}\n`);
      return 2;
    }
    process.stderr.write(`cockatiel peer: ${e && e.stack || e}\n`);
    return 1;
  }
}

// Exit at once: timers of calls abandoned after the drain must not hold
// the process.
main(process.argv.slice(2)).then(code => process.exit(code), e => {
  process.stderr.write(`cockatiel peer: ${e && e.stack || e}\n`);
  process.exit(1);
});
