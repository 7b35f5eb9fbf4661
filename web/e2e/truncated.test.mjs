// A long output the server kept as head + tail (--output-limit; the whole
// text an artifact): the UI shows the head, "… N bytes omitted …" and the
// tail, and "Show all" loads the whole text from the artifact by ranges.
// A tool input past the limit shows bounded, with a note loading it all.
// Skips on a server without --output-limit.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { after, before, describe, it } from "node:test";
import { Agentd, agentdBin, createShellSession, launch, lineCounts, outputText, send, waitFor, waitIdle, withPage } from "./harness.mjs";

let browser;
let server;
const N = 3000; // "line 1" … "line 3000": 32,893 bytes, far over the 4 KiB limit
let why = "";

before(async () => {
  const help = execFileSync(agentdBin(), ["serve", "--help"], { encoding: "utf8" });
  if (!help.includes("--output-limit")) {
    why = "this agentd has no --output-limit (long outputs are kept whole)";
    return;
  }
  browser = await launch();
  server = new Agentd({ args: ["--output-limit", "4KiB"] });
  await server.start();
});
after(async () => {
  await browser?.close();
  await server?.stop();
  server?.cleanup();
});

describe("truncated outputs", () => {
  it("shows head, bytes omitted and tail, and loads it all", async (t) => {
    if (why) return t.skip(why);
    await withPage(t, browser, server, { width: 1280, height: 1000 }, async (page) => {
      const id = await createShellSession(page, server, "long output");
      await send(page, `for i in $(seq 1 ${N}); do echo line $i; done`);
      await waitIdle(page);
      const cut = page.getByTestId("truncated");
      await cut.waitFor({ timeout: 30_000 });
      const omitted = await page.getByTestId("omitted").innerText();
      const m = /… ([\d,.\s]+) bytes omitted …/.exec(omitted);
      assert.ok(m, `omitted note: ${omitted}`);
      const { blocks } = await server.api("GET", `/api/sessions/${id}`);
      const res = blocks.find((b) => b.truncated);
      assert.ok(res?.truncated?.artifact, "the block has its artifact");
      const head = await page.getByTestId("tool-output-head").innerText();
      const tail = await page.getByTestId("tool-output-tail").innerText();
      assert.match(head, /^line 1\n/);
      assert.match(tail, new RegExp(`line ${N}\\s*$`));
      const shownBytes = Buffer.byteLength(res.output) + Buffer.byteLength(res.truncated.tail);
      assert.equal(Number(m[1].replace(/\D/g, "")), res.truncated.totalBytes - shownBytes);
      await page.getByTestId("show-all").click();
      await page.getByTestId("truncated-full").waitFor({ timeout: 30_000 });
      const full = page.getByTestId("truncated-full");
      if ((await full.getByTestId("expand-output").count()) > 0) await full.getByTestId("expand-output").click();
      await full.getByTestId("collapse-output").waitFor();
      const all = await outputText(page);
      const counts = lineCounts(all, N);
      const missing = counts.map((c, i) => (i > 0 && c !== 1 ? i : 0)).filter(Boolean);
      assert.deepEqual(missing.slice(0, 10), [], `every line once after Show all (got ${all.length} characters: ${all.slice(0, 80)} … ${all.slice(-80)})`);
      await waitFor(async () => (await page.getByTestId("truncated").count()) === 0, { what: "the cut view to go" });
    });
  });

  it("shows a bounded tool input with a note, and loads the whole input", async (t) => {
    if (why) return t.skip(why);
    await withPage(t, browser, server, { width: 1280, height: 1000 }, async (page) => {
      const id = await createShellSession(page, server, "long input");
      const word = "0123456789".repeat(600); // a command of 6 KB: its input JSON is over 4 KiB
      await send(page, `echo ${word} | wc -c`);
      await waitIdle(page);
      const note = page.getByTestId("input-truncated");
      await note.waitFor({ timeout: 30_000 });
      assert.match(await note.innerText(), /input truncated: \d+\.\d KB/);
      const { blocks } = await server.api("GET", `/api/sessions/${id}`);
      const use = blocks.find((b) => b.type === "tool_use");
      assert.equal(use?.truncated?.field, "input");
      assert.ok(use.truncated.artifact, "the block has its artifact");
      assert.match(use.input.command, /bytes omitted/);
      // The command ran whole: only the log's copy is bounded.
      const res = blocks.find((b) => b.type === "tool_result");
      assert.equal(res?.output.trim(), String(word.length + 1));
      const cmd = page.getByTestId("tool-command").first();
      assert.match(await cmd.innerText(), /bytes omitted/);
      await page.getByTestId("show-all-input").click();
      await waitFor(async () => (await note.count()) === 0, { what: "the note to go" });
      assert.ok((await cmd.innerText()).includes(word), "the whole command after show all");
    });
  });
});
