// Rendering of every block kind, and permission Allow/Deny, from real Claude
// Code turns, and a shell call from each other agent CLI: the real
// `agentd serve` runs the pinned CLIs (tools/agents) against `agentd
// mock-llm` playing the model (e2e/scripts/claude.yaml for Claude Code,
// e2e/scripts/codex-gemini-opencode.yaml for the others). One server and
// the two model servers serve all the cases; each case has its own session.
// A case whose CLI is missing skips and says so.
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { Agentd, MockLLM, agentPath, architectures, createSession, duplicateBlocks, here, launch, send, waitFor, waitIdle, withPage } from "./harness.mjs";

let browser;
let server;
let mock; // Claude Code's model
let mock2; // the other CLIs' model
let archs; // GET /api/architectures by name
let claude; // the claude-code architecture entry

before(async () => {
  [mock, mock2, browser] = await Promise.all([
    new MockLLM(path.join(here, "scripts/claude.yaml")).start(),
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
  claude = archs.get("claude-code");
});
after(async () => {
  await browser?.close();
  await server?.stop();
  server?.cleanup();
  mock?.stop();
  mock2?.stop();
});

/**
 * Why an architecture cannot be tested here, or "" when it can. With
 * AGENTD_REQUIRE_AGENTS set (scripts/test.sh, CI) a missing one
 * fails the test instead.
 */
function missing(name) {
  const a = archs.get(name);
  if (a?.available) return "";
  const why = `${name} unavailable on this server (${a?.problem ?? "not listed"}): install the pinned agent CLIs with scripts/setup.sh`;
  if (process.env.AGENTD_REQUIRE_AGENTS) throw new Error(why);
  return why;
}

/** The text of the element, or "" when it is not there. */
const text = (loc) => loc.first().innerText().catch(() => "");

/** The element's text on one line, as a reader would say it. */
const flat = async (loc) => ((await loc.first().textContent()) ?? "").replace(/\s+/g, " ").trim();

/** How the UI prints a token count (SessionView's fmtTokens). */
const fmtTokens = (n) => (n >= 10_000 ? `${(n / 1000).toFixed(1)}k` : String(n));

describe("block rendering (claude-code + mock-llm)", () => {
  it("renders every block kind of a real Claude Code turn", async (t) => {
    const why = missing("claude-code");
    if (why) return t.skip(why);
    // Tall enough that the virtualized conversation keeps every block in the DOM.
    await withPage(t, browser, server, { width: 1280, height: 1600 }, async (page) => {
      const id = await createSession(page, server, { profile: "render", architecture: claude.name, name: "render" });
      // Claude Code's Write and Edit take absolute paths: the script reads the
      // workspace from the end of the message.
      const ws = path.join(server.dataDir, "workspaces", id);
      const prompt = `RENDER-DEMO in ${ws}`;
      await send(page, prompt);
      const conv = page.getByTestId("conversation");
      // The subagent's tool call shows while it runs: its Bash command waits
      // for release-subagent, which the test creates once it has seen the
      // call, still running, in the subagent's thread.
      const liveCall = page.getByTestId("block-subagent").locator('[data-tool="Bash"]');
      await liveCall.waitFor({ state: "attached", timeout: 60_000 });
      assert.equal(await liveCall.locator(".dot").getAttribute("aria-label"), "running");
      assert.equal(await liveCall.getByTestId("tool-output").count(), 0);
      assert.equal(await page.getByTestId("block-subagent").getByTestId("subagent-thread").locator("summary .dot").getAttribute("aria-label"), "running");
      assert.equal(await page.getByTestId("turn-running").count(), 1);
      writeFileSync(path.join(ws, "release-subagent"), "");
      await conv.getByText("All done: the greeting says hi.").waitFor({ timeout: 60_000 });
      await waitIdle(page);

      // the user's message
      assert.equal(await text(page.getByTestId("block-user_message")), prompt);

      // thinking: collapsed until opened
      const thinking = page.getByTestId("block-thinking");
      assert.equal(await thinking.getAttribute("open"), null, "thinking starts collapsed");
      assert.equal(await thinking.locator(".thinking-body").isVisible(), false);
      await thinking.locator("summary").click();
      assert.equal(await thinking.locator(".thinking-body").innerText(), "Let me look at the code first.");

      // markdown, safely
      const md = page.getByTestId("block-assistant_text").first();
      assert.equal(await md.locator("h4").innerText(), "Plan");
      assert.equal(await md.locator("strong").first().innerText(), "fix");
      assert.equal(await md.locator("p code").first().innerText(), "greeting");
      const link = md.locator("a");
      assert.equal(await link.getAttribute("href"), "https://example.com/main.go");
      assert.match(await link.getAttribute("rel"), /noopener/);
      assert.equal(await md.locator("ol > li").count(), 2);
      assert.match(await md.locator("pre code").innerText(), /fmt\.Println\("hi"\)/);
      assert.equal(await conv.locator("script").count(), 0, "no script element from the model's text");
      assert.match(await md.innerText(), /<script>alert\(1\)<\/script>/);

      // Write: a new file is all additions
      const write = conv.locator('[data-tool="Write"]');
      assert.equal(await write.locator(".dot").getAttribute("aria-label"), "done");
      // paths relative to the workspace; a new file numbered from 1
      assert.equal(await write.locator(".diff-path span").first().innerText(), "main.go");
      assert.equal(await write.getByTestId("tool-toggle").locator(".tool-arg").innerText(), "main.go");
      assert.equal(await write.locator(".diff .del").count(), 0);
      assert.deepEqual(await write.locator(".diff .add .code-text").allInnerTexts().then((l) => l.map((x) => x.trim())), ["package main", "", "func main() {", 'fmt.Println("hello")', "}"]);
      assert.deepEqual(await write.locator(".diff .add .ln:nth-child(2)").allInnerTexts(), ["1", "2", "3", "4", "5"]);
      // highlighted as Go
      await write.locator(".diff .hljs-keyword").first().waitFor();
      // Edit: one line out, one in
      const edit = conv.locator('[data-tool="Edit"]');
      assert.equal(await edit.locator(".dot").getAttribute("aria-label"), "done");
      assert.match(await edit.locator(".diff .del").innerText(), /fmt\.Println\("hello"\)/);
      assert.match(await edit.locator(".diff .add").innerText(), /fmt\.Println\("hi"\)/);
      assert.equal(await edit.locator(".diff .del, .diff .add").count(), 2);

      // the skill the model loaded, collapsed, its content rendered as markdown
      const skill = page.getByTestId("block-skill_load");
      assert.equal(await skill.locator("summary").innerText(), "Skill loaded: e2e-style");
      await skill.locator("summary").click();
      assert.equal(await skill.locator("strong").innerText(), "hi");
      assert.match(await skill.innerText(), /Always greet with hi, never hello\./);

      // Bash, terminal style: the command after a prompt, then its output
      const bash = conv.locator('[data-tool="Bash"]').first();
      assert.equal(await flat(bash.locator(".tool-head")), "▾Bash — Print three lines");
      assert.equal(await bash.locator("pre.terminal.cmd").innerText(), "$ for i in 1 2 3; do echo bash line $i; done");
      assert.equal(await bash.getByTestId("tool-output").innerText(), "bash line 1\nbash line 2\nbash line 3");
      assert.match(await bash.getByTestId("tool-output").getAttribute("class"), /\bterminal\b/);

      // the subagent: its own thread, nested in the Task call's block, with
      // its tool call and text
      const sub = page.getByTestId("block-subagent");
      assert.equal(await sub.count(), 1);
      const thread = sub.getByTestId("subagent-thread");
      assert.match(await thread.locator("summary").innerText(), /List the Go files/);
      assert.equal(await thread.locator("summary .dot").getAttribute("aria-label"), "done");
      await thread.locator("summary").click();
      await checkThread(thread);

      // usage and cost: what the server reduced, as the UI prints it
      const st = await server.api("GET", `/api/sessions/${id}`);
      assert.ok(st.usage.inputTokens > 0 && st.usage.outputTokens > 0 && st.costUSD > 0, `usage ${JSON.stringify(st.usage)} cost ${st.costUSD}`);
      checkUsage(await page.getByTestId("usage").innerText(), st);
      assert.deepEqual(await duplicateBlocks(page), []);
      assert.deepEqual(await missingBlocks(page, st), [], "every block the server has is on screen");

      // an error: the model fails the next turn, and says so once, with its
      // code (the CLI's error message, its error event and the turn's
      // failure are one error)
      await send(page, "BREAK-DEMO now");
      await page.getByTestId("notice-turn_failed").waitFor({ timeout: 30_000 });
      await waitIdle(page);
      assert.match(await flat(page.getByTestId("notice-turn_failed").locator(".notice-text")), /^Model error: API Error: 400 mock-llm refuses this request \(MODEL_ERROR\)$/);
      assert.equal(await page.getByTestId("notice-turn_failed").count(), 1, "one notice for the failed turn");
      assert.equal(await conv.getByTestId("block-error").count(), 0, "the CLI's error message is not shown a second time");
      assert.equal(await conv.locator('[role="alert"]').count(), 1, "one error in the conversation");
      const failedTurns = (await server.api("GET", `/api/sessions/${id}`)).turns.filter((t) => t.status === "failed");
      assert.equal(failedTurns.length, 1, "the snapshot records the failed turn");
      assert.equal(failedTurns[0].code, "MODEL_ERROR");

      // A reload renders the same conversation from the snapshot, the
      // subagent's thread included, and the failed turn's notice (from the
      // snapshot's turns, not from live events), once.
      await page.reload();
      const notice = page.getByTestId("notice-turn_failed");
      await notice.waitFor();
      assert.match(await flat(notice.locator(".notice-text")), /^Model error: .+ \(MODEL_ERROR\)$/s);
      assert.equal(await notice.count(), 1, "the reloaded page shows the failed turn's notice once");
      assert.equal(await conv.getByTestId("block-error").count(), 0);
      assert.ok(await page.evaluate(() => {
        const users = document.querySelectorAll('[data-testid="block-user_message"]');
        const n = document.querySelector('[data-testid="notice-turn_failed"]');
        return !!n && users.length > 0 && !!(users[users.length - 1].compareDocumentPosition(n) & Node.DOCUMENT_POSITION_FOLLOWING);
      }), "the notice follows the failed turn's message");
      // Retry sends the turn's message again.
      await notice.getByTestId("retry-turn").click();
      await waitFor(async () => (await page.getByTestId("notice-turn_failed").count()) === 2, { what: "the retried turn to fail again", timeout: 30_000 });
      assert.deepEqual((await conv.getByTestId("block-user_message").allInnerTexts()).slice(-2), ["BREAK-DEMO now", "BREAK-DEMO now"]);
      const again = page.getByTestId("block-subagent").getByTestId("subagent-thread");
      await again.locator("summary").click();
      await checkThread(again);
      assert.deepEqual(await duplicateBlocks(page), []);
    });
  });

  it("answers permission requests with Allow and Deny, with a live countdown", async (t) => {
    const why = missing("claude-code");
    if (why) return t.skip(why);
    await withPage(t, browser, server, { width: 375, height: 740 }, async (page) => {
      // The default profile allows no tools: every Bash call asks.
      const id = await createSession(page, server, { architecture: claude.name, name: "perm" });

      await send(page, "PERM-ALLOW please write the file");
      const req = page.getByTestId("permission-request");
      await req.waitFor({ timeout: 60_000 });
      assert.match(await flat(req.locator(".perm-head")), /^Bash wants to run ?\d+:\d\d left$/);
      assert.equal(await req.locator(".perm-input").innerText(), "$ echo allowed-ran | tee allowed.txt");
      // the call it belongs to says it waits
      await page.locator('[data-tool="Bash"]').getByTestId("awaiting-permission").waitFor();
      const c1 = await page.getByTestId("permission-countdown").innerText();
      assert.match(c1, /^\d+:\d\d left$/);
      const c2 = await waitFor(async () => {
        const c = await page.getByTestId("permission-countdown").innerText();
        return c !== c1 && c;
      }, { timeout: 5000, what: "the countdown to tick" });
      const secs = (c) => c.match(/^(\d+):(\d\d)/).slice(1).reduce((m, x) => m * 60 + Number(x), 0);
      assert.ok(secs(c2) < secs(c1), `the countdown goes down: ${c1} then ${c2}`);
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 0, `the permission card makes the page scroll sideways by ${overflow}px`);
      await page.getByTestId("permission-allow").click();
      await req.waitFor({ state: "detached", timeout: 30_000 });
      await page.getByTestId("conversation").getByText("finished the allowed call").waitFor({ timeout: 60_000 });
      assert.equal(await page.locator('[data-tool="Bash"]').getByTestId("tool-output").innerText(), "allowed-ran");
      assert.equal(await page.getByTestId("awaiting-permission").count(), 0);

      // Deny: the request disappears and the agent goes on without running it.
      await waitIdle(page);
      await send(page, "PERM-DENY please write another file");
      await req.waitFor({ timeout: 60_000 });
      // Deny with a message: the agent is told what to do instead.
      await page.getByTestId("permission-deny").click();
      await page.getByTestId("permission-deny-message").fill("use printf instead");
      await page.getByTestId("permission-deny-send").click();
      await req.waitFor({ state: "detached", timeout: 30_000 });
      const deniedText = page.getByTestId("conversation").getByText(/finished the denied call/);
      await deniedText.waitFor({ timeout: 60_000 });
      assert.match(await deniedText.innerText(), /use printf instead/);
      const denied = page.locator('[data-tool="Bash"]').nth(1);
      assert.equal(await denied.locator(".dot").getAttribute("aria-label"), "failed");
      await waitIdle(page);
      const names = (await server.api("GET", `/api/sessions/${id}/files`)).files.map((f) => f.path);
      assert.ok(names.includes("allowed.txt"), "the allowed call ran");
      assert.ok(!names.includes("denied.txt"), "the denied call did not run");
    });
  });

  // Codex, Gemini CLI and OpenCode: the same scripted shell call through each
  // CLI's own protocol and the server's converter for it.
  for (const arch of ["codex", "gemini-cli", "opencode"]) {
    it(`renders a shell call made through ${arch}`, async (t) => {
      const why = missing(arch);
      if (why) return t.skip(why);
      await withPage(t, browser, server, {}, async (page) => {
        const id = await createSession(page, server, { profile: "auto", architecture: arch, name: arch });
        await send(page, "SHELL-PROBE now");
        const conv = page.getByTestId("conversation");
        await conv.getByText(/^The probe ran for (openai|gemini)\.$/).waitFor({ timeout: 90_000 });
        await waitIdle(page);
        assert.equal(await text(page.getByTestId("block-user_message")), "SHELL-PROBE now");
        const md = page.getByTestId("block-assistant_text").first();
        assert.equal(await md.locator("strong").innerText(), "probe");
        const call = conv.locator('[data-testid="block-tool_use"]');
        assert.equal(await call.count(), 1);
        assert.match(await call.locator("pre.terminal.cmd").innerText(), /^\$ .*echo probe-ran && echo second line/);
        assert.equal((await call.getByTestId("tool-output").innerText()).trim(), "probe-ran\nsecond line");
        assert.equal(await call.locator(".dot").getAttribute("aria-label"), "done");
        const st = await server.api("GET", `/api/sessions/${id}`);
        if (st.blocks.some((b) => b.type === "thinking")) {
          await page.getByTestId("block-thinking").locator("summary").click();
          assert.equal(await page.getByTestId("block-thinking").locator(".thinking-body").innerText(), "A shell command will tell.");
        }
        assert.ok(st.usage.inputTokens > 0, `usage ${JSON.stringify(st.usage)}`);
        checkUsage(await page.getByTestId("usage").innerText(), st);
        assert.deepEqual(await duplicateBlocks(page), []);
        assert.deepEqual(await missingBlocks(page, st), [], "every block the server has is on screen");
      });
    });
  }
});

/** Block ids the server has that the page does not show (results show inside their calls). */
async function missingBlocks(page, st) {
  const all = [...st.blocks, ...st.subagents.flatMap((s) => s.blocks)];
  const shown = new Set(await page.evaluate(() => [...document.querySelectorAll("[data-block-id]")].map((e) => e.getAttribute("data-block-id"))));
  return all.filter((b) => b.type !== "tool_result" && !shown.has(b.id)).map((b) => `${b.type} ${b.id}`);
}

/** The usage line as the UI should print it from the server's state. */
function checkUsage(usage, st) {
  const re = (s) => new RegExp(s.replace(/[.$]/g, "\\$&"));
  assert.match(usage, re(`${fmtTokens(st.usage.inputTokens)} in`));
  assert.match(usage, re(`${fmtTokens(st.usage.outputTokens)} out`));
  if (st.costUSD) assert.match(usage, re(`$${st.costUSD.toFixed(4)}`));
}

/** The subagent's thread: its prompt, text, Bash call with output, answer. */
async function checkThread(thread) {
  const blocks = thread.locator(".sub-blocks");
  assert.equal(await text(blocks.getByTestId("block-user_message")), "SUBTASK: list the Go files with Bash");
  assert.deepEqual(await blocks.getByTestId("block-assistant_text").allInnerTexts(), ["Listing them.", "Found 1 Go file: main.go."]);
  const call = blocks.locator('[data-tool="Bash"]');
  assert.equal(await call.locator("pre.terminal.cmd").innerText(), "$ until [ -e release-subagent ]; do sleep 0.1; done; ls *.go && echo sub-ran");
  assert.equal(await call.getByTestId("tool-output").innerText(), "main.go\nsub-ran");
  assert.equal(await call.locator(".dot").getAttribute("aria-label"), "done");
}

