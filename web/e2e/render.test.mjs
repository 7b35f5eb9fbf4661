// Rendering of every block kind, and permission Allow/Deny, against
// e2e/fakeagentd: the real server can only produce these with an agent CLI
// and a model (see permission.mjs for the real-server version). The fake is
// built here with `go build`; without a Go toolchain these tests skip.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { Agentd, createShellSession, here, launch, outputText, send, sleep, waitFor, withPage } from "./harness.mjs";

const repo = path.resolve(here, "../..");
const fakeBin = path.join(mkdtempSync(path.join(tmpdir(), "fakeagentd-")), "fakeagentd");
const built = spawnSync("go", ["build", "-o", fakeBin, "./web/e2e/fakeagentd"], { cwd: repo, stdio: "inherit" }).status === 0;

let browser;
let server;
before(async () => {
  if (!built) return;
  browser = await launch();
  server = new Agentd({ bin: fakeBin });
  await server.start();
});
after(async () => {
  await browser?.close();
  await server?.stop();
  server?.cleanup();
});

describe("block rendering (fakeagentd)", { skip: built ? false : "no Go toolchain to build e2e/fakeagentd" }, () => {
  it("renders thinking, markdown, diffs, subagent threads, errors and usage", async (t) => {
    await withPage(t, browser, server, {}, async (page) => {
      await createShellSession(page, server, "demo");
      await send(page, "demo");
      await page.getByTestId("usage").waitFor({ timeout: 15_000 });
      // thinking: collapsed, expandable
      const thinking = page.getByTestId("block-thinking");
      await thinking.locator("summary").click();
      assert.match(await thinking.innerText(), /Let me look at the code first\./);
      // markdown, safely
      const md = page.getByTestId("block-assistant_text").first();
      assert.equal(await md.locator("h4").innerText(), "Plan");
      assert.equal(await md.locator("strong").first().innerText(), "fix");
      const link = md.locator("a");
      assert.equal(await link.getAttribute("href"), "https://example.com/main.go");
      assert.match(await link.getAttribute("rel"), /noopener/);
      assert.equal(await md.locator("ol > li").count(), 2);
      assert.match(await md.locator("pre code").innerText(), /fmt\.Println\("hi"\)/);
      assert.equal(await page.locator("[data-testid=conversation] script").count(), 0);
      assert.match(await md.innerText(), /<script>alert\(1\)<\/script>/);
      // Edit as a diff
      const diff = page.locator('[data-tool="Edit"] [data-testid="diff"]');
      assert.match(await diff.locator(".del").innerText(), /fmt\.Println\("hello"\)/);
      assert.match(await diff.locator(".add").innerText(), /fmt\.Println\("hi"\)/);
      assert.equal(await diff.locator(".ctx").count(), 1);
      // subagent as a nested, collapsible thread in its Task call
      const thread = page.locator('[data-tool="Task"] [data-testid="subagent-thread"]');
      await thread.locator("summary").click();
      assert.match(await thread.innerText(), /Found 2 Go files\./);
      assert.match(await thread.innerText(), /List the Go files/);
      // error block and usage
      assert.match(await page.getByTestId("block-error").innerText(), /Error \(RATE_LIMIT\):\s*rate limited, retrying/);
      const usage = await page.getByTestId("usage").innerText();
      assert.match(usage, /1200 in/);
      assert.match(usage, /340 out/);
      assert.match(usage, /\$0\.0123/);
    });
  });

  it("answers permission requests with Allow and Deny, with a live countdown", async (t) => {
    await withPage(t, browser, server, { width: 375, height: 740 }, async (page) => {
      await createShellSession(page, server, "perm");
      await send(page, "ask: echo permitted-ran");
      const req = page.getByTestId("permission-request");
      await req.waitFor();
      assert.match(await req.innerText(), /Bash/);
      assert.match(await req.innerText(), /echo permitted-ran/);
      const c1 = await page.getByTestId("permission-countdown").innerText();
      assert.match(c1, /^0:4\d left$/);
      await sleep(1500);
      assert.notEqual(await page.getByTestId("permission-countdown").innerText(), c1, "countdown is live");
      await page.getByTestId("permission-allow").click();
      await req.waitFor({ state: "detached" });
      await waitFor(async () => /^permitted-ran$/m.test(await outputText(page)), { what: "the allowed command's output" });

      await waitFor(async () => (await page.getByTestId("send-button").count()) === 1 && (await page.getByTestId("turn-running").count()) === 0, { what: "idle" });
      await send(page, "ask: echo denied-ran");
      await req.waitFor();
      await page.getByTestId("permission-deny").click();
      await req.waitFor({ state: "detached" });
      await page.getByText("Permission denied; not running it.").waitFor();
      assert.doesNotMatch(await outputText(page), /^denied-ran$/m);
    });
  });
});
