// Browser tests of issue 14 with real agent CLIs against `agentd mock-llm`
// (e2e/scripts/features-claude.yaml for Claude Code, the shared
// codex-gemini-opencode.yaml for the others): long conversations of every
// architecture opened on reload and on click, the permission card (diff,
// allow once / for the session / deny with a message, keys, focus, Esc),
// a denied edit shown as not applied, Markdown tables and highlighted code
// with a copy button, and the turn's tokens while it runs. Screenshots go
// to web/e2e/artifacts/screens.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { Agentd, MockLLM, agentPath, architectures, axeViolations, createSession, fatalErrors, here, launch, screenshot, send, sleep, waitFor, waitIdle, withPage } from "./harness.mjs";

const DESKTOP = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };

let browser;
let server;
let mock;
let mock2;
let archs;

before(async () => {
  [mock, mock2, browser] = await Promise.all([
    new MockLLM(path.join(here, "scripts/features-claude.yaml")).start(),
    new MockLLM(path.join(here, "scripts/codex-gemini-opencode.yaml")).start(),
    launch(),
  ]);
  server = new Agentd({
    args: ["--profiles", path.join(here, "profiles")],
    env: {
      PATH: agentPath(),
      ANTHROPIC_BASE_URL: mock.url,
      ANTHROPIC_API_KEY: "mock-key",
      OPENAI_BASE_URL: mock2.url + "/v1",
      OPENAI_API_KEY: "mock-key",
      GOOGLE_GEMINI_BASE_URL: mock2.url,
      GEMINI_API_KEY: "mock-key",
    },
  });
  server.mock = mock;
  await server.start();
  archs = await architectures(server);
});
after(async () => {
  await browser?.close();
  await server?.stop();
  server?.cleanup();
  mock?.stop();
  mock2?.stop();
});

function missing(name) {
  const a = archs.get(name);
  if (a?.available) return "";
  const why = `${name} unavailable on this server (${a?.problem ?? "not listed"}): install the pinned agent CLIs with scripts/setup.sh`;
  if (process.env.AGENTD_REQUIRE_AGENTS) throw new Error(why);
  return why;
}

const flat = async (loc) => ((await loc.first().textContent()) ?? "").replace(/\s+/g, " ").trim();

async function runTurn(id, content) {
  const n = (await server.api("GET", `/api/sessions/${id}`)).turns.length;
  await server.api("POST", `/api/sessions/${id}/messages`, { content });
  await waitFor(async () => {
    const s = await server.api("GET", `/api/sessions/${id}`);
    return s.turns.length > n && s.turns.at(-1).status !== "running" && !s.activeQueryId;
  }, { timeout: 120_000, what: `turn "${content}"` });
}

async function assertWholeAndAtEnd(page, what) {
  await page.getByTestId("conversation").waitFor({ timeout: 15_000 });
  await waitFor(async () => page.evaluate(() => {
    const el = document.querySelector('[data-testid="conversation"]');
    return !!el && el.scrollHeight - el.scrollTop - el.clientHeight < 60;
  }), { what: `${what}: the conversation at its end`, timeout: 10_000 });
  await sleep(300);
  assert.deepEqual(fatalErrors(page), [], `${what}: page errors`);
  assert.equal(await page.locator(".layout").count(), 1, `${what}: the app is gone`);
  assert.equal(await page.getByTestId("pane-error").count(), 0, `${what}: a pane failed`);
  const last = page.locator('[data-testid="block-assistant_text"]').last();
  assert.match(await last.innerText(), /That is the whole answer\./, `${what}: the last answer on screen`);
}

describe("the web UI with agent CLIs (issue 14)", () => {
  it("opens long conversations of every architecture on reload and on click, desktop and phone", async (t) => {
    const sessions = [];
    for (const [arch, profile, turns] of [["claude-code", "default", 3], ["codex", "auto", 2], ["gemini-cli", "auto", 2], ["opencode", "auto", 2]]) {
      if (missing(arch)) {
        t.diagnostic(missing(arch));
        continue;
      }
      const { sessionId } = await server.api("POST", "/api/sessions", { architecture: arch, agentProfileRef: profile, name: `long ${arch}` });
      for (let i = 1; i <= turns; i++) await runTurn(sessionId, `LONG-ANSWER number ${i}`);
      sessions.push([arch, sessionId]);
    }
    const { sessionId: small } = await server.api("POST", "/api/sessions", { architecture: "shell", name: "small" });
    for (const size of [DESKTOP, PHONE]) {
      await withPage(t, browser, server, size, async (page) => {
        for (const [arch, id] of sessions) {
          await page.goto(`${server.url}/s/${id}`);
          await assertWholeAndAtEnd(page, `reload of ${arch} at ${size.width}px`);
          if (arch === "claude-code" || arch === "opencode") await screenshot(page, `long-${arch}-${size.width}`);
        }
        for (const [arch, id] of sessions) {
          await page.goto(`${server.url}/s/${small}`);
          await page.getByTestId("session-view").waitFor();
          if (size.width < 700) await page.getByRole("button", { name: "Back to sessions" }).click();
          await page.locator(`[data-testid="session-item"][data-session-id="${id}"]`).click();
          await assertWholeAndAtEnd(page, `click on ${arch} at ${size.width}px`);
        }
        // The long answer's table and code are rendered, not raw.
        if (sessions.length) {
          assert.ok((await page.locator("table.md-table").count()) > 0, "a table");
          assert.ok((await page.locator(".md-code .hljs-keyword").count()) > 0, "highlighted code");
        }
      });
    }
  });

  it("asks for permission with the tool's input, allows once or for the session, denies with a message, and Esc stops the turn", async (t) => {
    const why = missing("claude-code");
    if (why) return t.skip(why);
    await withPage(t, browser, server, DESKTOP, async (page) => {
      const id = await createSession(page, server, { architecture: archs.get("claude-code").name, name: "permissions" });
      const ws = path.join(server.dataDir, "workspaces", id);
      const req = page.getByTestId("permission-request");

      // A Write: its content as a diff, not JSON; the card has the focus.
      await send(page, `PERM-WRITE in ${ws}`);
      await req.waitFor({ timeout: 60_000 });
      assert.match(await flat(req.locator(".perm-head")), /^Write wants to change a file ?\d+:\d\d left$/);
      const input = req.getByTestId("permission-input");
      await input.getByTestId("diff").waitFor();
      assert.equal(await input.locator("pre.json").count(), 0, "no raw JSON");
      assert.doesNotMatch(await input.innerText(), /\\n/);
      assert.equal(await input.locator(".diff-path span").first().innerText(), "notes.txt");
      assert.deepEqual(await input.locator(".add .code-text").allInnerTexts(), ["line one", "line two"]);
      await waitFor(async () => (await page.evaluate(() => document.activeElement?.getAttribute("data-testid"))) === "permission-request", { what: "the card to take the focus" });
      // The turn's progress names the tool it waits on. (Claude Code reports
      // a turn's tokens at its end, so the bar has none yet.)
      assert.match(await page.getByTestId("turn-activity").innerText(), /^Write: notes\.txt/);
      assert.deepEqual(await axeViolations(page), [], "the permission card: serious accessibility violations");
      await screenshot(page, "permission-write-1400");
      // The same request on a phone: no sideways scrolling.
      const phone = await browser.newContext({ viewport: PHONE });
      const p2 = await phone.newPage();
      await p2.goto(`${server.url}/s/${id}`);
      await p2.getByTestId("permission-request").getByTestId("diff").waitFor();
      const overflow = await p2.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 0, `the permission card scrolls sideways by ${overflow}px on a phone`);
      await screenshot(p2, "permission-write-390");
      await phone.close();

      // Key 2: allow Write for the rest of the session.
      await page.keyboard.press("2");
      await req.waitFor({ state: "detached", timeout: 30_000 });
      await page.getByTestId("conversation").getByText(/write finished/).waitFor({ timeout: 60_000 });
      await waitIdle(page);
      // Tokens and cost show on a phone too.
      await page.setViewportSize(PHONE);
      await page.getByTestId("usage").waitFor();
      assert.match(await page.getByTestId("usage").innerText(), /in · .* out · \$\d/);
      await screenshot(page, "usage-phone");
      await page.setViewportSize(DESKTOP);
      // The next Write is allowed by the rule: no card.
      await send(page, `PERM-WRITE in ${ws}`);
      await waitFor(async () => (await page.getByTestId("conversation").getByText(/write finished/).count()) === 2, { what: "the second Write, allowed by the rule", timeout: 60_000 });
      await waitIdle(page, 60_000);
      assert.equal(await req.count(), 0, "no card for a Write the rule allows");
      const { events } = await server.api("GET", `/api/sessions/${id}/events?after=0&limit=10000`);
      const resolved = events.filter((e) => e.type === "permission:resolved").map((e) => `${e.payload.by}:${e.payload.toolName}:${e.payload.scope ?? ""}`);
      assert.deepEqual(resolved, ["user:Write:session", "rule:Write:"]);
      assert.deepEqual((await server.api("GET", `/api/sessions/${id}`)).permissionRules, [{ toolName: "Write", behavior: "allow" }]);

      // An Edit still asks; key 3 opens the deny form, the message goes to the agent.
      await send(page, `PERM-EDIT in ${ws}`);
      await req.waitFor({ timeout: 60_000 });
      assert.equal(await req.locator(".del .code-text").innerText(), "line two");
      assert.equal(await req.locator(".add .code-text").innerText(), "line 2");
      await waitFor(async () => (await page.evaluate(() => document.activeElement?.getAttribute("data-testid"))) === "permission-request", { what: "focus on the Edit request" });
      await page.keyboard.press("3");
      await waitFor(async () => (await page.evaluate(() => document.activeElement?.getAttribute("data-testid"))) === "permission-deny-message", { what: "focus in the deny message" });
      await page.keyboard.type("keep line two as it is");
      await page.keyboard.press("Enter");
      await req.waitFor({ state: "detached", timeout: 30_000 });
      const done = page.getByTestId("conversation").getByText(/edit finished/);
      await done.waitFor({ timeout: 60_000 });
      // The reply streams in: "edit finished" shows before the quoted message.
      await waitFor(async () => /keep line two as it is/.test(await done.innerText()), { timeout: 30_000, what: "the reply quoting the deny message" });
      await waitIdle(page);
      // The denied Edit does not look applied.
      const edit = page.locator('[data-tool="Edit"]');
      assert.equal(await edit.getByTestId("edit-denied").innerText(), "not applied");
      assert.equal(await edit.locator('[data-testid="diff"]').getAttribute("data-not-applied"), "true");
      assert.equal(await edit.locator(".diff-stat .plus").count(), 0, "no +/- counts on a change that did not happen");
      assert.ok((await server.api("GET", `/api/sessions/${id}/files/notes.txt`).catch(() => null)) === null || true);
      const notes = await (await fetch(`${server.url}/api/sessions/${id}/files/notes.txt`)).text();
      assert.equal(notes, "line one\nline two\n", "the file is unchanged");
      await screenshot(page, "edit-denied-1400");

      // Esc on a waiting request stops the turn.
      await send(page, "PERM-BASH now");
      await req.waitFor({ timeout: 60_000 });
      await waitFor(async () => (await page.evaluate(() => document.activeElement?.getAttribute("data-testid"))) === "permission-request", { what: "focus on the Bash request" });
      await page.keyboard.press("Escape");
      await req.waitFor({ state: "detached", timeout: 30_000 });
      await page.getByTestId("notice-turn_interrupted").waitFor({ timeout: 30_000 });
      await waitIdle(page);
    });
  });

  it("renders Markdown tables and highlighted code with a copy button", async (t) => {
    const why = missing("claude-code");
    if (why) return t.skip(why);
    await withPage(t, browser, server, DESKTOP, async (page) => {
      await page.context().grantPermissions(["clipboard-read", "clipboard-write"], { origin: server.url });
      await createSession(page, server, { architecture: archs.get("claude-code").name, name: "markdown" });
      await send(page, "MD-DEMO please");
      const md = page.getByTestId("block-assistant_text").last();
      await md.locator("table").waitFor({ timeout: 60_000 });
      await waitIdle(page);
      assert.deepEqual(await md.locator("th").allInnerTexts(), ["File", "Lines", "Status"]);
      assert.deepEqual(await md.locator("tbody tr").first().locator("td").allInnerTexts(), ["main.go", "12", "ok"]);
      assert.equal(await md.locator("td code").first().innerText(), "main.go");
      assert.equal(await md.locator("th").nth(1).evaluate((e) => getComputedStyle(e).textAlign), "right");
      const code = md.locator("pre.md-code");
      await code.locator(".hljs-keyword").first().waitFor();
      assert.deepEqual(await code.locator(".hljs-keyword").allInnerTexts(), ["package", "func"]);
      await md.locator(".md-code-wrap").getByTestId("copy-button").click();
      await waitFor(async () => (await md.locator('.md-code-wrap [data-copied]').count()) === 1, { what: "the copied state" });
      const clip = await page.evaluate(() => navigator.clipboard.readText());
      assert.equal(clip, 'package main\n\nfunc main() {\n\tprintln("hi")\n}');
      await screenshot(page, "markdown-1400");
      await page.setViewportSize(PHONE);
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 0, `the table makes the page scroll sideways by ${overflow}px`);
      await screenshot(page, "markdown-390");
    });
  });
});
