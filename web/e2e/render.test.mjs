// Rendering of every block kind, and permission Allow/Deny, from real Claude
// Code turns: the real `agentd serve` runs the pinned CLI (tools/agents)
// against `agentd mock-llm` playing the model from e2e/scripts/claude.yaml.
// One server and one model serve all the cases; each case has its own
// session. Without the claude CLI the cases skip and say so.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { Agentd, MockLLM, agentPath, architectures, createSession, duplicateBlocks, here, launch, send, waitFor, waitIdle, withPage } from "./harness.mjs";

let browser;
let server;
let mock;
let claude; // the claude-code architecture entry, when available
let unavailable = "";

before(async () => {
  mock = await new MockLLM(path.join(here, "scripts/claude.yaml")).start();
  server = new Agentd({
    args: ["--profiles", path.join(here, "profiles")],
    env: { PATH: agentPath(), ANTHROPIC_BASE_URL: mock.url, ANTHROPIC_API_KEY: "mock-key" },
  });
  server.mock = mock;
  await server.start();
  claude = (await architectures(server)).get("claude-code");
  if (!claude?.available) unavailable = `claude-code unavailable (${claude?.problem ?? "not listed"}): install the pinned CLIs with scripts/setup.sh`;
  else browser = await launch();
});
after(async () => {
  await browser?.close();
  await server?.stop();
  server?.cleanup();
  mock?.stop();
});

/** The text of the element, or "" when it is not there. */
const text = (loc) => loc.first().innerText().catch(() => "");

/** The element's text on one line, as a reader would say it. */
const flat = async (loc) => ((await loc.first().textContent()) ?? "").replace(/\s+/g, " ").trim();

/** How the UI prints a token count (SessionView's fmtTokens). */
const fmtTokens = (n) => (n >= 10_000 ? `${(n / 1000).toFixed(1)}k` : String(n));

describe("block rendering (claude-code + mock-llm)", () => {
  it("renders every block kind of a real Claude Code turn", async (t) => {
    if (unavailable) return t.skip(unavailable);
    await withPage(t, browser, server, {}, async (page) => {
      const id = await createSession(page, server, { profile: "render", architecture: claude.name, name: "render" });
      // Claude Code's Write and Edit take absolute paths: the script reads the
      // workspace from the end of the message.
      const ws = path.join(server.dataDir, "workspaces", id);
      const prompt = `RENDER-DEMO in ${ws}`;
      await send(page, prompt);
      const conv = page.getByTestId("conversation");
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
      assert.equal(await write.locator(".diff-path").innerText(), path.join(ws, "main.go"));
      assert.equal(await write.locator(".diff .del").count(), 0);
      assert.deepEqual(await write.locator(".diff .add").allInnerTexts().then((l) => l.map((x) => x.replace(/^\+\s?/, "").trim())), ["package main", "", "func main() {", 'fmt.Println("hello")', "}"]);
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
      assert.equal(await flat(bash.locator(".tool-head")), "Bash — Print three lines");
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
      const usage = await page.getByTestId("usage").innerText();
      assert.match(usage, new RegExp(`${fmtTokens(st.usage.inputTokens).replace(".", "\\.")} in`));
      assert.match(usage, new RegExp(`${fmtTokens(st.usage.outputTokens).replace(".", "\\.")} out`));
      assert.match(usage, new RegExp(`\\$${st.costUSD.toFixed(4).replace(".", "\\.")}`));
      assert.deepEqual(await duplicateBlocks(page), []);
      const onServer = [...st.blocks.map((b) => b.id), ...st.subagents.flatMap((s) => s.blocks.map((b) => b.id))];
      const shown = await page.evaluate(() => [...document.querySelectorAll("[data-block-id]")].map((e) => e.getAttribute("data-block-id")));
      const results = new Set([...st.blocks, ...st.subagents.flatMap((s) => s.blocks)].filter((b) => b.type === "tool_result").map((b) => b.id));
      assert.deepEqual(onServer.filter((b) => !results.has(b) && !shown.includes(b)), [], "every block the server has is on screen (results inside their calls)");

      // an error: the model fails the next turn
      await send(page, "BREAK-DEMO now");
      const err = page.getByTestId("block-error");
      await err.waitFor({ timeout: 30_000 });
      assert.match(await err.innerText(), /^Error( \([^)]*\))?: API Error: 400 mock-llm refuses this request$/);
      await page.getByTestId("notice-turn_failed").waitFor();
      assert.match(await page.getByTestId("notice-turn_failed").innerText(), /MODEL_ERROR/);
      await waitIdle(page);

      // A reload renders the same conversation from the snapshot, the
      // subagent's thread included.
      await page.reload();
      await page.getByTestId("block-error").waitFor();
      const again = page.getByTestId("block-subagent").getByTestId("subagent-thread");
      await again.locator("summary").click();
      await checkThread(again);
      assert.deepEqual(await duplicateBlocks(page), []);
    });
  });

  it("answers permission requests with Allow and Deny, with a live countdown", async (t) => {
    if (unavailable) return t.skip(unavailable);
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
      await waitFor(async () => (await page.getByTestId("permission-countdown").innerText()) !== c1, { timeout: 3000, what: "the countdown to tick" });
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 0, `the permission card makes the page scroll sideways by ${overflow}px`);
      await page.getByTestId("permission-allow").click();
      await req.waitFor({ state: "detached", timeout: 30_000 });
      await page.getByText("finished the allowed call").waitFor({ timeout: 60_000 });
      assert.equal(await page.locator('[data-tool="Bash"]').getByTestId("tool-output").innerText(), "allowed-ran");
      assert.equal(await page.getByTestId("awaiting-permission").count(), 0);

      // Deny: the request disappears and the agent goes on without running it.
      await waitIdle(page);
      await send(page, "PERM-DENY please write another file");
      await req.waitFor({ timeout: 60_000 });
      await page.getByTestId("permission-deny").click();
      await req.waitFor({ state: "detached", timeout: 30_000 });
      await page.getByText(/finished the denied call/).waitFor({ timeout: 60_000 });
      const denied = page.locator('[data-tool="Bash"]').nth(1);
      assert.equal(await denied.locator(".dot").getAttribute("aria-label"), "failed");
      await waitIdle(page);
      const names = (await server.api("GET", `/api/sessions/${id}/files`)).files.map((f) => f.path);
      assert.ok(names.includes("allowed.txt"), "the allowed call ran");
      assert.ok(!names.includes("denied.txt"), "the denied call did not run");
    });
  });
});

/** The subagent's thread: its prompt, text, Bash call with output, answer. */
async function checkThread(thread) {
  const blocks = thread.locator(".sub-blocks");
  assert.equal(await text(blocks.getByTestId("block-user_message")), "SUBTASK: list the Go files with Bash");
  assert.deepEqual(await blocks.getByTestId("block-assistant_text").allInnerTexts(), ["Listing them.", "Found 1 Go file: main.go."]);
  const call = blocks.locator('[data-tool="Bash"]');
  assert.equal(await call.locator("pre.terminal.cmd").innerText(), "$ ls *.go && echo sub-ran");
  assert.equal(await call.getByTestId("tool-output").innerText(), "main.go\nsub-ran");
  assert.equal(await call.locator(".dot").getAttribute("aria-label"), "done");
}

