// Shared setup for the browser tests: a real `agentd serve` (AGENTD_BIN) on a
// free loopback port with a fresh data dir, and Debian's Chromium driven by
// playwright-core (never a downloaded browser).
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, existsSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

export const here = path.dirname(fileURLToPath(import.meta.url));
export const artifacts = path.join(here, "artifacts");
export const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
/** The pinned agent CLIs (scripts/setup.sh installs them). */
export const agentsBin = path.resolve(here, "../../tools/agents/node_modules/.bin");

/** PATH for a server that should find the pinned agent CLIs. */
export function agentPath() {
  return (existsSync(agentsBin) ? agentsBin + ":" : "") + process.env.PATH;
}

export function agentdBin() {
  const bin = process.env.AGENTD_BIN;
  if (!bin) throw new Error("AGENTD_BIN is not set: build the server (go build -o /tmp/agentd ./cmd/agentd) and export AGENTD_BIN=/tmp/agentd");
  if (!existsSync(bin)) throw new Error(`AGENTD_BIN=${bin} does not exist`);
  return bin;
}

/**
 * A loopback port free now, for a server started later on it. Picked at
 * random below Linux's ephemeral range (32768 and up): a port listen(0)
 * gave and then released could be handed again to the next listen(0) (the
 * test OIDC provider's) or to an outgoing connection before the server
 * binds it ("address already in use"); below the range only another
 * explicit pick can take it.
 */
export async function freePort() {
  for (let i = 0; ; i++) {
    const port = 20000 + Math.floor(Math.random() * 12000);
    const ok = await new Promise((resolve) => {
      const s = createServer();
      s.once("error", () => resolve(false));
      s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
    });
    if (ok) return port;
    if (i >= 100) throw new Error("no free loopback port found in 20000-31999");
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * A running agentd. stop() kills it (SIGKILL by default, as a crash would);
 * start() starts it again on the same port and data dir.
 */
export class Agentd {
  constructor({ dataDir, port, args = [], env = {}, bin } = {}) {
    this.bin = bin;
    this.dataDir = dataDir ?? mkdtempSync(path.join(tmpdir(), "agentd-e2e-"));
    this.port = port;
    this.args = args;
    this.env = env;
    this.proc = null;
    this.log = [];
  }
  get url() {
    return `http://127.0.0.1:${this.port}`;
  }
  async start() {
    if (!this.port) this.port = await freePort();
    const bin = this.bin ?? agentdBin();
    const proc = spawn(bin, ["serve", "--addr", `127.0.0.1:${this.port}`, "--data-dir", this.dataDir, ...this.args], {
      env: { ...process.env, ...this.env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.proc = proc;
    const collect = (d) => {
      this.log.push(d.toString());
      if (this.log.length > 2000) this.log.splice(0, 1000);
    };
    proc.stdout.on("data", collect);
    proc.stderr.on("data", collect);
    const exited = new Promise((r) => proc.once("exit", (code, sig) => r({ code, sig })));
    this.exited = exited;
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      const early = await Promise.race([exited, sleep(100).then(() => null)]);
      if (early) throw new Error(`agentd exited (${JSON.stringify(early)}) before serving:\n${this.log.join("")}`);
      try {
        const r = await fetch(this.url + "/health");
        if (r.ok) return this;
      } catch {
        // not listening yet
      }
    }
    throw new Error(`agentd did not answer /health within 30 s:\n${this.log.join("")}`);
  }
  async stop(signal = "SIGKILL") {
    if (!this.proc) return;
    const p = this.proc;
    this.proc = null;
    if (p.exitCode === null && p.signalCode === null) {
      p.kill(signal);
      await this.exited;
    }
  }
  async api(method, p, body, headers = {}) {
    const r = await fetch(this.url + p, {
      method,
      headers: { "Content-Type": "application/json", ...headers },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await r.text();
    if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${text}`);
    return text ? JSON.parse(text) : null;
  }
  cleanup() {
    try {
      rmSync(this.dataDir, { recursive: true, force: true });
    } catch {
      // best effort
    }
  }
}

/**
 * `agentd mock-llm` on a free loopback port, answering from a script file
 * (see docs/mock-llm.md). stop() kills it.
 */
export class MockLLM {
  constructor(script) {
    this.script = script;
    this.proc = null;
    this.log = [];
  }
  async start() {
    this.port = await freePort();
    this.url = `http://127.0.0.1:${this.port}`;
    const proc = spawn(agentdBin(), ["mock-llm", "--addr", `127.0.0.1:${this.port}`, "--script", this.script], { stdio: ["ignore", "pipe", "pipe"] });
    this.proc = proc;
    const collect = (d) => this.log.push(String(d));
    proc.stdout.on("data", collect);
    proc.stderr.on("data", collect);
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      if (proc.exitCode !== null) throw new Error(`mock-llm exited (${proc.exitCode}):\n${this.log.join("")}`);
      try {
        if ((await fetch(this.url + "/_mockllm/requests")).ok) return this;
      } catch {
        // not listening yet
      }
      await sleep(50);
    }
    this.stop();
    throw new Error(`mock-llm did not start:\n${this.log.join("")}`);
  }
  /** The request log (GET /_mockllm/requests). */
  async requests() {
    const r = await fetch(this.url + "/_mockllm/requests");
    const body = await r.json();
    return Array.isArray(body) ? body : body.requests ?? [];
  }
  stop() {
    if (this.proc && this.proc.exitCode === null) this.proc.kill("SIGKILL");
    this.proc = null;
  }
}

/** GET /api/architectures as a map from name (and alias) to its entry. */
export async function architectures(server) {
  const { architectures: list } = await server.api("GET", "/api/architectures");
  const m = new Map();
  for (const a of list) for (const n of [a.name, ...(a.aliases ?? [])]) m.set(n, a);
  return m;
}

export async function launch() {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get update && apt-get install -y chromium`);
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}

/**
 * Opens a page that records its console; on test failure (call fail(t) in
 * an after hook or use withPage) it saves a screenshot and the console log.
 */
export async function openPage(browser, { width = 1280, height = 800 } = {}) {
  const context = await browser.newContext({ viewport: { width, height } });
  const page = await context.newPage();
  const consoleLog = [];
  page.on("console", (m) => consoleLog.push(`[${m.type()}] ${m.text()}`));
  page.on("pageerror", (e) => consoleLog.push(`[pageerror] ${e.stack ?? e.message}`));
  page.consoleLog = consoleLog;
  return page;
}

export async function saveArtifacts(name, page, server) {
  mkdirSync(artifacts, { recursive: true });
  const base = path.join(artifacts, name.replace(/[^a-z0-9-_]+/gi, "_"));
  try {
    await page.screenshot({ path: base + ".png", fullPage: true });
  } catch (e) {
    writeFileSync(base + ".screenshot-error.txt", String(e));
  }
  writeFileSync(base + ".console.log", (page.consoleLog ?? []).join("\n") + "\n");
  if (server) writeFileSync(base + ".server.log", server.log.join(""));
  if (server?.mock) {
    let reqs = "";
    try {
      reqs = JSON.stringify(await server.mock.requests(), null, 1);
    } catch (e) {
      reqs = String(e);
    }
    writeFileSync(base + ".mock-llm.log", server.mock.log.join("") + "\n--- request log ---\n" + reqs + "\n");
  }
}

/**
 * Runs fn(page) and saves artifacts if it throws (always with
 * E2E_SCREENSHOTS set). Artifacts go to
 * web/e2e/artifacts/<test name>.{png,console.log,server.log,mock-llm.log}.
 */
export async function withPage(t, browser, server, opts, fn) {
  const page = await openPage(browser, opts);
  try {
    await fn(page);
    // E2E_SCREENSHOTS=1 keeps them for passing tests too, to look at the UI.
    if (process.env.E2E_SCREENSHOTS) await saveArtifacts(t.name, page, server);
  } catch (e) {
    await saveArtifacts(t.name, page, server);
    throw e;
  } finally {
    await page.context().close();
  }
}

// ---- UI steps ---------------------------------------------------------------

/** Creates a session through the new-session dialog; returns its id. */
export async function createSession(page, server, { architecture, profile, name } = {}) {
  await page.goto(server.url + "/");
  await page.getByTestId("new-session-button").click();
  const dialog = page.getByTestId("new-session-dialog");
  await dialog.waitFor();
  if (profile) await page.getByTestId("profile-select").selectOption(profile, { timeout: 10_000 });
  // Architectures can take seconds to list (the server probes each agent CLI).
  if (architecture) await page.getByTestId("architecture-select").selectOption(architecture, { timeout: 90_000 });
  if (name) await page.getByTestId("name-input").fill(name);
  await page.getByTestId("create-session").click();
  await page.getByTestId("session-view").waitFor();
  return page.getByTestId("session-view").getAttribute("data-session-id");
}

export function createShellSession(page, server, name = "e2e") {
  return createSession(page, server, { architecture: "shell", name });
}

/** Waits until the open session has no running turn and can send again. */
export async function waitIdle(page, timeout = 60_000) {
  await waitFor(async () => (await page.getByTestId("turn-running").count()) === 0 && (await page.getByTestId("send-button").count()) === 1, { timeout, what: "the turn to end" });
}

export async function send(page, text) {
  await page.getByTestId("composer-input").fill(text);
  await page.getByTestId("send-button").click();
}

/**
 * The text of every tool output in the conversation, joined. Long outputs
 * show only their last lines until expanded: this expands them first.
 */
export async function outputText(page) {
  return page.evaluate(() => {
    for (const b of document.querySelectorAll('[data-testid="expand-output"]')) b.click();
    return [...document.querySelectorAll('[data-testid="tool-output"]')].map((e) => e.textContent ?? "").join("\n");
  });
}

/** How often each "line N" occurs in the conversation's tool output. */
export function lineCounts(text, n) {
  const counts = new Array(n + 1).fill(0);
  for (const m of text.matchAll(/^line (\d+)$/gm)) {
    const i = Number(m[1]);
    if (i >= 1 && i <= n) counts[i]++;
  }
  return counts;
}

export async function waitFor(fn, { timeout = 30_000, interval = 100, what = "condition" } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  while (Date.now() < deadline) {
    last = await fn();
    if (last) return last;
    await sleep(interval);
  }
  throw new Error(`timed out after ${timeout} ms waiting for ${what} (last: ${JSON.stringify(last)})`);
}

/** Block ids rendered more than once in the DOM (must be empty). */
export async function duplicateBlocks(page) {
  return page.evaluate(() => {
    const seen = new Map();
    for (const el of document.querySelectorAll("[data-block-id]")) seen.set(el.getAttribute("data-block-id"), (seen.get(el.getAttribute("data-block-id")) ?? 0) + 1);
    return [...seen].filter(([, n]) => n > 1).map(([id]) => id);
  });
}

export { sleep };

// ---- screenshots and accessibility ------------------------------------------

/** Where the browser tests' screenshots go (printed once per run). */
export const screens = path.join(artifacts, "screens");
let screensAnnounced = false;

/** Saves a screenshot of the page (the viewport) as screens/<name>.png. */
export async function screenshot(page, name) {
  mkdirSync(screens, { recursive: true });
  if (!screensAnnounced) {
    screensAnnounced = true;
    console.log(`# screenshots: ${screens}`);
  }
  const file = path.join(screens, name.replace(/[^a-z0-9-_]+/gi, "_") + ".png");
  await page.screenshot({ path: file });
  return file;
}

const axeSource = path.resolve(here, "../node_modules/axe-core/axe.min.js");

/**
 * Runs axe-core (WCAG 2.x A/AA rules) on the page and returns the serious
 * and critical violations, each as "rule: target (summary)".
 */
export async function axeViolations(page) {
  if (!(await page.evaluate(() => !!window.axe))) await page.addScriptTag({ path: axeSource });
  const res = await page.evaluate(async () => {
    const r = await window.axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"] }, resultTypes: ["violations"] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.map((n) => `${n.target.join(" ")} — ${n.failureSummary?.split("\n")[1]?.trim() ?? ""}`) }));
  });
  return res.filter((v) => v.impact === "serious" || v.impact === "critical").flatMap((v) => v.nodes.slice(0, 5).map((n) => `${v.id} (${v.impact}): ${n}`));
}

/** Page errors and React's fatal errors logged so far. */
export function fatalErrors(page) {
  return (page.consoleLog ?? []).filter((l) => l.startsWith("[pageerror]") || /Minified React error|Maximum update depth/.test(l));
}

// ---- an OpenID Connect provider ----------------------------------------------

const repoRoot = path.resolve(here, "../..");
let testopBuilt;

/**
 * The test OP's binary (internal/auth/oidctest/testop: zitadel's OP with a
 * login form): OIDC_TESTOP_BIN, else built once per run with `go build`.
 */
async function testopBin() {
  if (process.env.OIDC_TESTOP_BIN) return process.env.OIDC_TESTOP_BIN;
  testopBuilt ??= new Promise((resolve, reject) => {
    const out = path.join(mkdtempSync(path.join(tmpdir(), "agentd-testop-")), "testop");
    const p = spawn("go", ["build", "-o", out, "./internal/auth/oidctest/testop"], { cwd: repoRoot, stdio: ["ignore", "inherit", "inherit"] });
    p.on("error", reject);
    p.on("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`go build testop: exit ${code}`))));
  });
  return testopBuilt;
}

/**
 * A real OpenID Connect provider on a loopback port, as its own process.
 * clients: {id: redirectUri}; users: [{username, password, subject, name}];
 * idTokenTTL and refreshTokenTTL ("0": never) are Go durations. It issues
 * refresh tokens to sign-ins that ask for the offline_access scope.
 * stop() ends it (closing its stdin ends it too, if this process dies).
 */
export class TestOP {
  constructor({ clients, users, idTokenTTL = "1h", refreshTokenTTL = "0" }) {
    this.clients = clients;
    this.users = users;
    this.ttl = idTokenTTL;
    this.refreshTTL = refreshTokenTTL;
    this.log = [];
  }
  async start() {
    const args = ["--id-token-ttl", this.ttl, "--refresh-token-ttl", this.refreshTTL];
    for (const [id, uri] of Object.entries(this.clients)) args.push("--client", `${id}=${uri}`);
    for (const u of this.users) args.push("--user", `${u.username}:${u.password}:${u.subject}:${u.name}`);
    const proc = spawn(await testopBin(), args, { stdio: ["pipe", "pipe", "pipe"] });
    this.proc = proc;
    proc.stderr.on("data", (d) => this.log.push(String(d)));
    this.issuer = await new Promise((resolve, reject) => {
      let buf = "";
      const timer = setTimeout(() => reject(new Error(`testop did not start:\n${this.log.join("")}`)), 30_000);
      proc.stdout.on("data", (d) => {
        buf += String(d);
        const nl = buf.indexOf("\n");
        if (nl < 0) return;
        clearTimeout(timer);
        try {
          resolve(JSON.parse(buf.slice(0, nl)).issuer);
        } catch (e) {
          reject(e);
        }
      });
      proc.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`testop exited (${code}):\n${this.log.join("")}`));
      });
    });
    return this;
  }
  async stop() {
    const p = this.proc;
    this.proc = null;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise((r) => p.once("exit", r));
    p.kill("SIGTERM");
    await exited;
  }
}
