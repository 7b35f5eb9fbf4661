// Performance figures for the web UI (prints numbers; asserts nothing about
// time). Needs AGENTD_BIN. Run: AGENTD_BIN=/tmp/agentd npm run perf
//   PERF_BLOCKS=5000  blocks to seed (shell turns are sent until the session has them)
//   PERF_DELTAS_CMD   the command whose output streams into one block
import { Agentd, launch, openPage, sleep, waitFor } from "./harness.mjs";

const BLOCKS = Number(process.env.PERF_BLOCKS ?? 5000);
// `seq 1 10000` alone reaches the server as one or a few output chunks; the
// sleep makes each line its own delta, so the block really gets ~10,000.
const DELTAS_CMD = process.env.PERF_DELTAS_CMD ?? "for i in $(seq 1 10000); do echo $i; sleep 0.001; done";

function pct(xs, p) {
  if (!xs.length) return 0;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}
const r1 = (x) => Math.round(x * 10) / 10;
function frameSummary(frames) {
  return { frames: frames.length, p50: r1(pct(frames, 50)), p95: r1(pct(frames, 95)), max: r1(Math.max(0, ...frames)), over50ms: frames.filter((f) => f > 50).length };
}

async function sendAndWait(server, id, content) {
  for (;;) {
    // queue:false: wait for each turn here rather than in the server's queue.
    const r = await fetch(`${server.url}/api/sessions/${id}/messages`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ content, queue: false }) });
    if (r.status === 202) break;
    if (r.status !== 409) throw new Error(`send: ${r.status} ${await r.text()}`);
    await sleep(2);
  }
}

async function idle(server, id) {
  await waitFor(async () => {
    const s = await server.api("GET", `/api/sessions/${id}`);
    return !s.activeQueryId && s.queuedMessages.length === 0;
  }, { timeout: 120_000, interval: 20, what: "idle" });
}

const server = new Agentd();
await server.start();
const browser = await launch();
const out = {};
try {
  // ---- seed a long conversation -------------------------------------------
  const { sessionId: big } = await server.api("POST", "/api/sessions", { architecture: "shell", name: "perf-5000" });
  await sendAndWait(server, big, "echo 1");
  await idle(server, big);
  const perTurn = (await server.api("GET", `/api/sessions/${big}`)).blocks.length;
  const turns = Math.ceil(BLOCKS / Math.max(1, perTurn));
  const seedStart = Date.now();
  for (let i = 2; i <= turns; i++) {
    await sendAndWait(server, big, `echo ${i}`);
    if (i % 250 === 0) process.stderr.write(`seeded ${i}/${turns} turns\n`);
  }
  await idle(server, big);
  const snap = await server.api("GET", `/api/sessions/${big}`);
  out.seed = { turns, blocksPerTurn: perTurn, blocks: snap.blocks.length, lastSeq: snap.lastSeq, seconds: (Date.now() - seedStart) / 1000 };

  // ---- first paint of the long conversation ----------------------------------
  const page = await openPage(browser, { width: 1280, height: 900 });
  await page.goto(server.url + "/"); // warm the static assets once, as a returning user would
  await page.getByTestId("new-session-button").waitFor();
  const t0 = Date.now();
  await page.goto(`${server.url}/s/${big}`);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="conversation"] .vitem').length > 0, null, { timeout: 60_000 });
  const paintedAt = await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now())))));
  const wall = Date.now() - t0;
  const info = await page.evaluate((id) => {
    const res = performance.getEntriesByType("resource").find((e) => e.name.endsWith(`/api/sessions/${id}`));
    return {
      snapshotFetchMs: res ? Math.round(res.responseEnd - res.startTime) : null,
      snapshotBytes: res ? res.encodedBodySize : null,
      mountedItems: document.querySelectorAll('[data-testid="conversation"] .vitem').length,
      domNodes: document.getElementsByTagName("*").length,
      heapMB: performance.memory ? Math.round(performance.memory.usedJSHeapSize / 1048576) : null,
    };
  }, big);
  out.firstPaint = { msSinceNavigation: Math.round(paintedAt), wallMs: wall, ...info };

  // ---- scrolling the long conversation top to bottom -------------------------
  const scroll = await page.evaluate(
    () =>
      new Promise((resolve) => {
        const el = document.querySelector('[data-testid="conversation"]');
        const frames = [];
        let last = performance.now();
        let maxMounted = 0;
        el.scrollTop = el.scrollHeight;
        const step = () => {
          const now = performance.now();
          frames.push(now - last);
          last = now;
          maxMounted = Math.max(maxMounted, el.querySelectorAll(".vitem").length);
          if (el.scrollTop <= 0) return resolve({ frames, maxMounted, heapMB: performance.memory ? Math.round(performance.memory.usedJSHeapSize / 1048576) : null });
          el.scrollTop -= 400;
          requestAnimationFrame(step);
        };
        requestAnimationFrame(step);
      }),
  );
  out.scroll = { ...frameSummary(scroll.frames.slice(1)), maxMountedItems: scroll.maxMounted, heapMBAfter: scroll.heapMB };
  await page.context().close();

  // ---- one block receiving many deltas --------------------------------------
  const { sessionId: d } = await server.api("POST", "/api/sessions", { architecture: "shell", name: "perf-deltas" });
  const p2 = await openPage(browser, { width: 1280, height: 900 });
  await p2.goto(`${server.url}/s/${d}`);
  await p2.getByTestId("composer-input").waitFor();
  await p2.evaluate(() => {
    window.__perf = { frames: [], last: performance.now(), running: true };
    const tick = () => {
      const now = performance.now();
      window.__perf.frames.push(now - window.__perf.last);
      window.__perf.last = now;
      if (window.__perf.running) requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
    window.__agentd.stats.deltas = 0;
    window.__agentd.stats.events = 0;
    window.__agentd.stats.commits = 0;
    window.__agentd.stats.blockRenders.clear();
  });
  const s0 = Date.now();
  await p2.getByTestId("composer-input").fill(DELTAS_CMD);
  await p2.getByTestId("send-button").click();
  await waitFor(async () => (await p2.getByTestId("send-button").count()) === 1 && (await p2.getByTestId("turn-running").count()) === 0 && (await p2.evaluate(() => window.__agentd.stats.events)) > 0, { timeout: 120_000, interval: 50, what: "the delta turn to end" });
  const took = Date.now() - s0;
  const res = await p2.evaluate(() => {
    window.__perf.running = false;
    const st = window.__agentd.stats;
    const renders = [...st.blockRenders.entries()].sort((a, b) => b[1] - a[1]);
    const lines = (document.querySelector('[data-testid="tool-output"]')?.textContent ?? "").split("\n").filter(Boolean).length;
    return { frames: window.__perf.frames, deltas: st.deltas, events: st.events, commits: st.commits, topBlockRenders: renders[0] ?? null, outputLines: lines };
  });
  out.deltas = {
    command: DELTAS_CMD,
    deltaEvents: res.deltas,
    events: res.events,
    stateCommits: res.commits,
    rendersOfBusiestBlock: res.topBlockRenders,
    outputLinesShown: res.outputLines,
    turnWallMs: took,
    ...frameSummary(res.frames.slice(1)),
  };
  await p2.context().close();
} finally {
  await browser.close();
  await server.stop();
  server.cleanup();
}
console.log(JSON.stringify(out, null, 2));
