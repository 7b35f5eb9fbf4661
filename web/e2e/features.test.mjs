// Browser tests of what a new user expects beyond streaming (issue 14),
// with `shell` sessions against a real agentd: long mixed conversations
// that must never blank the app, error boundaries, ANSI output and exit
// codes, collapsed outputs, the message queue, the session list, the
// new-session dialog with a workspace cloned from git, the Changes view,
// progress, and accessibility (axe-core, keys, focus). Screenshots go to
// web/e2e/artifacts/screens (printed at the start).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { Agentd, axeViolations, createShellSession, fatalErrors, launch, outputText, screenshot, send, sleep, waitFor, waitIdle, withPage } from "./harness.mjs";

const DESKTOP = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };

let browser;
let server;
before(async () => {
  browser = await launch();
  server = new Agentd({});
  await server.start();
});
after(async () => {
  await browser?.close();
  await server?.stop();
  server?.cleanup();
});

/** Creates a session over REST and runs its commands, each to its end. */
async function shellSession(name, commands) {
  const { sessionId } = await server.api("POST", "/api/sessions", { architecture: "shell", name });
  for (const c of commands) await runTurn(sessionId, c);
  return sessionId;
}

async function runTurn(id, content) {
  const before = (await server.api("GET", `/api/sessions/${id}`)).turns.length;
  await server.api("POST", `/api/sessions/${id}/messages`, { content });
  await waitFor(async () => {
    const s = await server.api("GET", `/api/sessions/${id}`);
    return s.turns.length > before && s.turns.at(-1).status !== "running" && !s.activeQueryId;
  }, { timeout: 60_000, what: `turn "${content}"` });
}

/** The conversation is on screen, scrolled to its end, and the app is whole. */
async function assertWholeAndAtEnd(page, what) {
  await page.getByTestId("conversation").waitFor({ timeout: 15_000 });
  await waitFor(async () => {
    return page.evaluate(() => {
      const el = document.querySelector('[data-testid="conversation"]');
      return !!el && el.scrollHeight - el.scrollTop - el.clientHeight < 60;
    });
  }, { what: `${what}: the conversation at its end`, timeout: 10_000 });
  await sleep(300); // a few frames for a loop to show, if there were one
  assert.deepEqual(fatalErrors(page), [], `${what}: page errors`);
  assert.equal(await page.locator(".layout").count(), 1, `${what}: the app is gone`);
  assert.equal(await page.getByTestId("pane-error").count(), 0, `${what}: a pane failed`);
}

describe("the web UI with shell sessions (issue 14)", () => {
  it("opens long mixed shell conversations on reload and on click, desktop and phone, without blanking", async (t) => {
    const ids = [
      await shellSession("seq then failing", ["seq 3000", "cat /nonexistent", "seq 500", "echo hi; exit 2"]),
      await shellSession("seq and stderr", ["seq 3000", "seq 3000 >&2; exit 1", "printf '\\033[32mgreen\\033[0m\\n'"]),
      await shellSession("many small", Array.from({ length: 25 }, (_, i) => `echo turn ${i}; seq ${i * 40}`)),
    ];
    const small = await shellSession("small", ["echo hi"]);
    for (const size of [DESKTOP, PHONE]) {
      await withPage(t, browser, server, size, async (page) => {
        for (const id of ids) {
          await page.goto(`${server.url}/s/${id}`);
          await assertWholeAndAtEnd(page, `reload of ${id} at ${size.width}px`);
        }
        await screenshot(page, `long-shell-${size.width}`);
        for (const id of ids) {
          await page.goto(`${server.url}/s/${small}`);
          await page.getByTestId("session-view").waitFor();
          if (size.width < 700) await page.getByRole("button", { name: "Back to sessions" }).click();
          await page.locator(`[data-testid="session-item"][data-session-id="${id}"]`).click();
          await assertWholeAndAtEnd(page, `click on ${id} at ${size.width}px`);
        }
      });
    }
  });

  it("keeps the app working when one pane fails", async (t) => {
    const id = await shellSession("boundary", ["echo one", "echo two"]);
    await withPage(t, browser, server, DESKTOP, async (page) => {
      await page.addInitScript(() => {
        window.__agentdFail = new Set(["conversation"]);
      });
      await page.goto(`${server.url}/s/${id}`);
      const failed = page.locator('[data-testid="pane-error"][data-pane="conversation"]');
      await failed.waitFor();
      assert.match(await failed.innerText(), /The conversation could not be shown/);
      // The rest works: the sidebar, the tabs, the composer.
      assert.ok((await page.getByTestId("session-item").count()) >= 1);
      await page.getByTestId("tab-workspace").click();
      await page.getByTestId("file-tree").waitFor();
      await page.getByTestId("tab-conversation").click();
      assert.equal(await page.getByTestId("composer-input").isVisible(), true);
      await screenshot(page, "pane-error-desktop");
      await page.evaluate(() => window.__agentdFail.clear());
      await failed.getByRole("button", { name: "Try again" }).click();
      await waitFor(async () => /two/.test(await outputText(page)), { what: "the conversation back" });
      assert.equal(await page.getByTestId("pane-error").count(), 0);
    });
  });

  it("renders ANSI colours, shows exit codes, collapses long output, and agentd strips nothing it shows", async (t) => {
    await withPage(t, browser, server, DESKTOP, async (page) => {
      await createShellSession(page, server, "ansi");
      await send(page, "printf '\\033[31mred\\033[0m plain \\033[1;32mbold green\\033[0m\\n'; echo to stderr >&2; exit 3");
      await waitIdle(page);
      const call = page.locator('[data-testid="block-tool_use"]').last();
      assert.equal(await call.locator(".ansi-red-fg").innerText(), "red");
      assert.equal(await call.locator(".ansi-green-fg.ansi-bold").innerText(), "bold green");
      const out = await call.getByTestId("tool-output").textContent();
      assert.ok(!out.includes("[31m") && !out.includes("\x1b"), `raw escape codes shown: ${JSON.stringify(out)}`);
      assert.equal(await call.getByTestId("exit-code").innerText(), "exit 3");
      assert.equal(await call.locator(".dot").getAttribute("aria-label"), "failed");
      // A long output starts collapsed to its last lines, with its length.
      await send(page, "seq 1 100");
      await waitIdle(page);
      const long = page.locator('[data-testid="block-tool_use"]').last();
      const expand = long.getByTestId("expand-output");
      assert.match(await expand.innerText(), /Show all 100 lines/);
      assert.equal((await long.getByTestId("tool-output").innerText()).trim().split("\n").length, 10);
      assert.match((await long.getByTestId("tool-output").innerText()).trim(), /^91\n[\s\S]*\n100$/);
      await screenshot(page, "ansi-exit-collapsed-desktop");
      await expand.click();
      assert.equal((await long.getByTestId("tool-output").innerText()).trim().split("\n").length, 100);
      // The whole card folds away and back.
      await long.getByTestId("tool-toggle").click();
      assert.equal(await long.getByTestId("tool-output").isVisible(), false);
      assert.match(await long.locator(".tool-head").innerText(), /100 lines/);
      await long.getByTestId("tool-toggle").click();
      assert.equal(await long.getByTestId("tool-output").isVisible(), true);
    });
  });

  it("queues messages typed while a turn runs, shows and cancels them, and runs the rest in order", async (t) => {
    await withPage(t, browser, server, DESKTOP, async (page) => {
      const id = await createShellSession(page, server, "queue");
      await send(page, "sleep 3; echo first");
      await page.getByTestId("turn-running").waitFor();
      // Enter queues while the turn runs (the button says so).
      const input = page.getByTestId("composer-input");
      await input.fill("echo second");
      assert.equal(await page.getByTestId("send-button").innerText(), "Queue");
      await input.press("Enter");
      await input.fill("echo third");
      await page.getByTestId("send-button").click();
      const queued = page.getByTestId("queued-message");
      await waitFor(async () => (await queued.count()) === 2, { what: "two queued messages" });
      assert.deepEqual(await queued.locator(".q-text").allInnerTexts(), ["echo second", "echo third"]);
      const st = await server.api("GET", `/api/sessions/${id}`);
      assert.deepEqual(st.queuedMessages.map((m) => m.content), ["echo second", "echo third"]);
      await screenshot(page, "queue-desktop");
      await queued.nth(1).getByTestId("cancel-queued").click();
      await waitFor(async () => (await queued.count()) === 1, { what: "the cancelled message gone" });
      await waitFor(async () => /^second$/m.test(await outputText(page)), { what: "the queued message run", timeout: 30_000 });
      await waitIdle(page);
      assert.equal(await queued.count(), 0);
      assert.deepEqual(await page.getByTestId("block-user_message").allInnerTexts(), ["sleep 3; echo first", "echo second"]);
      assert.doesNotMatch(await outputText(page), /^third$/m);
    });
  });

  it("shows progress while a turn runs", async (t) => {
    await withPage(t, browser, server, PHONE, async (page) => {
      await createShellSession(page, server, "progress");
      await send(page, "sleep 4");
      const bar = page.getByTestId("turn-running");
      await bar.waitFor();
      await waitFor(async () => /sleep 4/.test(await page.getByTestId("turn-activity").innerText()), { what: "the running command in the bar" });
      const e1 = await page.getByTestId("turn-elapsed").innerText();
      await waitFor(async () => (await page.getByTestId("turn-elapsed").innerText()) !== e1, { what: "the elapsed time to tick", timeout: 5000 });
      assert.match(await page.getByTestId("turn-elapsed").innerText(), /^\d+s$/);
      await screenshot(page, "progress-phone");
      await waitIdle(page);
    });
  });

  it("lists sessions with unique short ids, names from the first message, search, rename, delete", async (t) => {
    // Created in the same second: UUIDv7 ids share their first characters.
    const made = [];
    for (let i = 0; i < 3; i++) made.push((await server.api("POST", "/api/sessions", { architecture: "shell" })).sessionId);
    await runTurn(made[0], "echo named after me\nsecond line");
    await withPage(t, browser, server, DESKTOP, async (page) => {
      await page.goto(server.url + "/");
      const item = (id) => page.locator(`[data-testid="session-item"][data-session-id="${id}"]`);
      await item(made[2]).waitFor();
      const shorts = await Promise.all(made.map((id) => item(id).getByTestId("session-short-id").innerText()));
      assert.equal(new Set(shorts).size, 3, `short ids ${shorts}`);
      for (let i = 0; i < 3; i++) assert.ok(made[i].replace(/-/g, "").endsWith(shorts[i]), `${shorts[i]} is not the end of ${made[i]}`);
      await waitFor(async () => /echo named after me/.test(await item(made[0]).innerText()), { what: "the name from the first message" });
      assert.match(await item(made[1]).innerText(), /Untitled/);
      // Status: ready, or paused (can be continued) once stopped.
      assert.equal(await item(made[0]).getByTestId("session-item-status").innerText(), "ready");
      await server.api("DELETE", `/api/sessions/${made[0]}`);
      await waitFor(async () => (await item(made[0]).getByTestId("session-item-status").innerText()) === "paused", { what: "paused after the environment stopped" });
      assert.match(await item(made[0]).getByTestId("session-item-status").getAttribute("title"), /send a message to continue/);
      // Search.
      await page.getByTestId("session-search").fill("named after");
      await waitFor(async () => (await page.getByTestId("session-item").count()) === 1, { what: "search to filter" });
      await page.getByTestId("session-search").fill(shorts[2]);
      await waitFor(async () => (await page.getByTestId("session-item").count()) === 1 && (await item(made[2]).count()) === 1, { what: "search by short id" });
      await page.getByTestId("session-search").fill("");
      // Rename.
      const row = item(made[1]).locator("xpath=..");
      await row.hover();
      await row.getByTestId("rename-session").click();
      await page.getByTestId("rename-input").fill("renamed in the UI");
      await page.getByTestId("rename-input").press("Enter");
      await waitFor(async () => /renamed in the UI/.test(await item(made[1]).innerText()), { what: "the new name in the list" });
      assert.equal((await server.api("GET", `/api/sessions/${made[1]}`)).name, "renamed in the UI");
      await screenshot(page, "session-list-desktop");
      // Delete, with the history.
      await item(made[2]).locator("xpath=..").hover();
      await item(made[2]).locator("xpath=..").getByTestId("delete-session").click();
      const dialog = page.getByTestId("delete-dialog");
      await dialog.waitFor();
      assert.equal(await page.evaluate(() => !!document.activeElement?.closest('[data-testid="delete-dialog"]')), true, "the dialog has the focus");
      await page.getByTestId("delete-confirm").click();
      await item(made[2]).waitFor({ state: "detached" });
      const list = (await server.api("GET", "/api/sessions")).sessions.map((s) => s.sessionId);
      assert.ok(!list.includes(made[2]), "purged");
    });
  });

  it("creates a session with a first message in a workspace cloned from git", async (t) => {
    const dir = mkdtempSync(path.join(tmpdir(), "agentd-e2e-git-"));
    try {
      const work = path.join(dir, "work");
      const git = (cwd, ...args) => execFileSync("git", args, { cwd, env: { ...process.env, GIT_AUTHOR_NAME: "t", GIT_AUTHOR_EMAIL: "t@x", GIT_COMMITTER_NAME: "t", GIT_COMMITTER_EMAIL: "t@x" } });
      execFileSync("git", ["init", "-q", "-b", "main", work]);
      writeFileSync(path.join(work, "README.md"), "# cloned for the test\n");
      git(work, "add", ".");
      git(work, "commit", "-q", "-m", "one");
      git(work, "checkout", "-q", "-b", "topic");
      writeFileSync(path.join(work, "topic.txt"), "on the topic branch\n");
      git(work, "add", ".");
      git(work, "commit", "-q", "-m", "two");
      execFileSync("git", ["clone", "-q", "--bare", work, path.join(dir, "repo.git")]);
      await withPage(t, browser, server, DESKTOP, async (page) => {
        await page.goto(server.url + "/");
        await page.getByTestId("new-session-button").click();
        const dialog = page.getByTestId("new-session-dialog");
        await dialog.waitFor();
        assert.equal(await page.evaluate(() => !!document.activeElement?.closest('[data-testid="new-session-dialog"]')), true, "the dialog takes the focus");
        await page.getByTestId("architecture-select").selectOption("shell", { timeout: 90_000 });
        await page.getByTestId("source-git").check();
        await page.getByTestId("git-url").fill(`file://${path.join(dir, "repo.git")}`);
        await page.getByTestId("git-branch").fill("topic");
        await page.getByTestId("first-prompt").fill("cat README.md topic.txt && git branch --show-current");
        await screenshot(page, "new-session-git-desktop");
        await page.getByTestId("create-session").click();
        await page.getByTestId("session-view").waitFor();
        await waitFor(async () => /on the topic branch\ntopic/.test(await outputText(page)), { what: "the clone's files", timeout: 60_000 });
        assert.match(await outputText(page), /# cloned for the test/);
        await page.getByTestId("tab-workspace").click();
        await page.locator('[data-testid="file-item"][data-path="README.md"]').waitFor();
        await waitFor(async () => /cat README\.md topic\.txt/.test(await page.locator(".session-title .name").innerText()), { what: "named after the first message" });
        // The permission mode is offered for Claude Code.
        await page.getByTestId("new-session-button").click();
        const sel = page.getByTestId("architecture-select");
        const options = await sel.locator("option:not([disabled])").allInnerTexts();
        if (options.some((o) => o.startsWith("claude-code"))) {
          await sel.selectOption("claude-code");
          await page.getByTestId("permission-mode").waitFor();
          assert.ok((await page.getByTestId("permission-mode").locator("option").count()) >= 3);
        }
        await page.keyboard.press("Escape");
        await dialog.waitFor({ state: "detached" });
        assert.equal(await page.evaluate(() => document.activeElement?.getAttribute("data-testid")), "new-session-button", "the focus returns");
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("shows what each turn changed, and downloads files and the workspace", async (t) => {
    await withPage(t, browser, server, DESKTOP, async (page) => {
      const id = await createShellSession(page, server, "changes");
      await send(page, "printf 'one\\ntwo\\nthree\\n' > a.txt && echo gone > old.txt");
      await waitIdle(page);
      await send(page, "printf 'one\\n2\\nthree\\n' > a.txt && rm old.txt && mkdir -p src && echo 'package main' > src/main.go");
      await waitIdle(page);
      await page.getByTestId("tab-changes").click();
      const items = page.getByTestId("change-item");
      await waitFor(async () => (await items.count()) === 2, { what: "the overall changes" });
      assert.deepEqual(await items.evaluateAll((l) => l.map((e) => `${e.dataset.change} ${e.dataset.path}`)), ["added a.txt", "added src/main.go"]);
      // Turn 2 alone: a.txt modified, old.txt deleted, src/main.go added.
      const opts = await page.getByTestId("changes-scope").locator("option").allInnerTexts();
      assert.equal(opts.length, 3);
      await page.getByTestId("changes-scope").selectOption({ index: 2 });
      await waitFor(async () => (await items.count()) === 3, { what: "turn 2's changes" });
      assert.deepEqual(await items.evaluateAll((l) => l.map((e) => `${e.dataset.change} ${e.dataset.path}`)), ["modified a.txt", "deleted old.txt", "added src/main.go"]);
      const diff = page.locator('[data-testid="file-change"][data-path="a.txt"]').getByTestId("change-diff");
      await diff.waitFor();
      assert.equal(await diff.locator(".del .code-text").innerText(), "two");
      assert.equal(await diff.locator(".add .code-text").innerText(), "2");
      assert.deepEqual(await diff.locator(".ctx .ln:first-child").allInnerTexts(), ["1", "3"]);
      await screenshot(page, "changes-desktop");
      // Downloads: the workspace as zip and tar.gz, a file.
      for (const [tid, type] of [["download-zip", "application/zip"], ["download-tar", "application/gzip"]]) {
        const href = await page.getByTestId(tid).getAttribute("href");
        const res = await page.request.get(server.url + href.replace(server.url, ""));
        assert.equal(res.status(), 200);
        assert.equal(res.headers()["content-type"], type);
        assert.ok((await res.body()).length > 50);
      }
      const [dl] = await Promise.all([page.waitForEvent("download"), page.locator('[data-testid="file-change"][data-path="a.txt"]').getByTestId("download-file").click()]);
      assert.equal(dl.suggestedFilename(), "a.txt");
      // Phone: the same view fits.
      await page.setViewportSize(PHONE);
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 0, `the changes view scrolls sideways by ${overflow}px on a phone`);
      await screenshot(page, "changes-phone");
      assert.ok(id);
    });
  });

  it("is accessible: axe-core finds no serious violation; skip link, arrow keys, focus", async (t) => {
    const id = await shellSession("a11y", ["mkdir -p d && echo x > d/a.txt && echo y > b.txt && printf '\\033[33mwarn\\033[0m\\n'", "seq 1 50", "exit 4"]);
    for (const size of [DESKTOP, PHONE]) {
      await withPage(t, browser, server, size, async (page) => {
        const check = async (what) => {
          const v = await axeViolations(page);
          assert.deepEqual(v, [], `${what} at ${size.width}px: serious accessibility violations`);
        };
        await page.goto(server.url + "/");
        await page.getByTestId("session-item").first().waitFor();
        await check("the session list");
        // The skip link is the first thing Tab reaches.
        await page.keyboard.press("Tab");
        assert.equal(await page.evaluate(() => document.activeElement?.getAttribute("data-testid")), "skip-link");
        await page.goto(`${server.url}/s/${id}`);
        await page.getByTestId("block-tool_use").first().waitFor();
        await check("a conversation");
        // Tabs: arrow keys move between them.
        await page.getByTestId("tab-conversation").focus();
        await page.keyboard.press("ArrowRight");
        assert.equal(await page.getByTestId("tab-changes").getAttribute("aria-selected"), "true");
        assert.equal(await page.evaluate(() => document.activeElement?.id), "tab-changes");
        await page.getByTestId("changes").waitFor();
        await page.getByTestId("change-item").first().waitFor();
        await check("the changes view");
        await page.keyboard.press("ArrowRight");
        assert.equal(await page.getByTestId("tab-workspace").getAttribute("aria-selected"), "true");
        // The file tree: arrows move, Right opens, Enter opens a file.
        const tree = page.getByTestId("file-tree");
        await tree.locator('[role="treeitem"]').first().waitFor();
        await tree.locator('[role="treeitem"][tabindex="0"]').focus();
        assert.equal(await page.evaluate(() => document.activeElement?.dataset.path), "d");
        await page.keyboard.press("ArrowDown");
        await waitFor(async () => (await page.evaluate(() => document.activeElement?.dataset.path)) === "d/a.txt", { what: "ArrowDown into the folder" });
        await page.keyboard.press("ArrowDown");
        await waitFor(async () => (await page.evaluate(() => document.activeElement?.dataset.path)) === "b.txt", { what: "ArrowDown to the next file" });
        await page.keyboard.press("Enter");
        await page.getByTestId("file-viewer").filter({ hasText: "y" }).waitFor();
        await page.keyboard.press("Home");
        await page.keyboard.press("ArrowLeft");
        await waitFor(async () => (await tree.locator('[data-path="d/a.txt"]').count()) === 0, { what: "ArrowLeft closes the folder" });
        await check("the file browser");
        await screenshot(page, `files-${size.width}`);
        await page.getByTestId("tab-conversation").click();
        if (size.width < 700) await page.getByRole("button", { name: "Back to sessions" }).click();
        await page.getByTestId("new-session-button").click();
        await page.getByTestId("new-session-dialog").waitFor();
        await check("the new-session dialog");
        await screenshot(page, `new-session-${size.width}`);
      });
    }
  });
});
