// Browser tests of the web UI against a real agentd (AGENTD_BIN).
// Run: AGENTD_BIN=/tmp/agentd npm run e2e
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import {
  Agentd,
  createShellSession,
  duplicateBlocks,
  launch,
  lineCounts,
  outputText,
  send,
  sleep,
  waitFor,
  waitIdle,
  withPage,
} from "./harness.mjs";

/**
 * Kills (by pid) the processes whose command line mentions dir: the
 * executors a test started under its own temporary run folder.
 */
function killProcessesUsing(dir) {
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(dir)) process.kill(Number(pid), "SIGKILL");
    } catch {
      // gone already, or not ours to read
    }
  }
}

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

/** Starts a fresh server for one test and stops it afterwards. */
async function withServer(opts, fn) {
  const server = new Agentd(opts);
  await server.start();
  try {
    await fn(server);
  } finally {
    await server.stop();
    server.cleanup();
  }
}

const loop = (n, sleepS) => `for i in $(seq 1 ${n}); do echo line $i; sleep ${sleepS}; done`;

describe("agentd web UI", () => {
  it("creates a shell session and streams a command's output", async (t) => {
    await withServer({}, async (server) => {
      await withPage(t, browser, server, {}, async (page) => {
        const id = await createShellSession(page, server, "stream");
        assert.ok(id, "session id in the view");
        await send(page, loop(20, 0.1));
        // Output must appear while the command runs, not only at the end.
        await waitFor(async () => /line 3$/m.test(await outputText(page)), { what: "line 3 while streaming" });
        const early = lineCounts(await outputText(page), 20);
        assert.ok(early[20] === 0, "line 20 already shown: output did not stream");
        await waitFor(async () => /line 20$/m.test(await outputText(page)), { what: "line 20" });
        await waitIdle(page);
        const counts = lineCounts(await outputText(page), 20);
        assert.deepEqual(counts.slice(1), new Array(20).fill(1), "every line exactly once");
        assert.deepEqual(await duplicateBlocks(page), []);
        // The session list shows it, live.
        const item = page.locator(`[data-testid="session-item"][data-session-id="${id}"]`);
        await item.waitFor();
        assert.match(await item.innerText(), /shell/);
        // A reload lands on the same session (a client route the server must
        // answer with the UI) and shows the same output from the snapshot.
        assert.match(page.url(), new RegExp(`/s/${id}$`));
        await page.reload();
        await page.getByTestId("session-view").waitFor();
        await waitFor(async () => /line 20$/m.test(await outputText(page)), { what: "output after reload" });
        assert.deepEqual(lineCounts(await outputText(page), 20).slice(1), new Array(20).fill(1), "every line exactly once after reload");
      });
    });
  });

  it("resumes after the WebSocket drops mid-command with every line exactly once", async (t) => {
    await withServer({}, async (server) => {
      await withPage(t, browser, server, {}, async (page) => {
        await createShellSession(page, server, "drop");
        await send(page, loop(40, 0.05));
        await waitFor(async () => /line 5$/m.test(await outputText(page)), { what: "line 5" });
        const before = await page.evaluate(() => window.__agentd.connects());
        const state = await page.evaluate(() => {
          window.__agentd.dropConnection();
          return window.__agentd.socket.state;
        });
        assert.equal(state, "reconnecting");
        await page.getByTestId("connection-state").filter({ hasText: "reconnecting" }).waitFor({ timeout: 5000 }).catch(() => {
          // the reconnect may already have happened; the state was asserted above
        });
        await waitFor(async () => (await page.getByTestId("connection-state").getAttribute("data-state")) === "connected", { what: "reconnect" });
        // Drop a second time, later in the run.
        await waitFor(async () => /line 20$/m.test(await outputText(page)), { what: "line 20" });
        await page.evaluate(() => window.__agentd.dropConnection());
        await waitFor(async () => /line 40$/m.test(await outputText(page)), { what: "line 40" });
        await waitIdle(page);
        assert.ok((await page.evaluate(() => window.__agentd.connects())) >= before + 2, "reconnected twice");
        const counts = lineCounts(await outputText(page), 40);
        assert.deepEqual(counts.slice(1), new Array(40).fill(1), "every line exactly once");
        assert.deepEqual(await duplicateBlocks(page), []);
      });
    });
  });

  it("reconnects after a server restart mid-command and shows the failed turn", async (t) => {
    await withServer({}, async (server) => {
      await withPage(t, browser, server, {}, async (page) => {
        await createShellSession(page, server, "restart");
        await send(page, loop(200, 0.05));
        await waitFor(async () => /line 10$/m.test(await outputText(page)), { what: "line 10" });
        await server.stop("SIGKILL");
        const seenBefore = lineCounts(await outputText(page), 200);
        await waitFor(async () => (await page.getByTestId("connection-state").getAttribute("data-state")) === "reconnecting", { what: "reconnecting state" });
        assert.match(await page.getByTestId("connection-state").innerText(), /reconnecting/);
        await sleep(500);
        await server.start();
        await waitFor(async () => (await page.getByTestId("connection-state").getAttribute("data-state")) === "connected", { what: "reconnect after restart", timeout: 30_000 });
        // The local sandbox's processes do not outlive the server: the running
        // turn is reported as failed (the executor sandbox's test below
        // completes it instead).
        await page.getByTestId("notice-turn_failed").waitFor({ timeout: 60_000 });
        const counts = lineCounts(await outputText(page), 200);
        for (let i = 1; i <= 200; i++) {
          if (seenBefore[i] > 0) assert.equal(counts[i], 1, `line ${i} (seen before the restart) exactly once`);
          assert.ok(counts[i] <= 1, `line ${i} at most once`);
        }
        assert.deepEqual(await duplicateBlocks(page), []);
        // The session still works after the restart. A crashed server's lease
        // on the session may still be unexpired (agentd's LeaseTTL, 30 s by
        // default): the UI then shows "running on another server"; retry.
        await waitIdle(page);
        const deadline = Date.now() + 60_000;
        for (;;) {
          await send(page, "echo after-restart");
          const ok = await waitFor(async () => /^after-restart$/m.test(await outputText(page)) || (await page.locator(".composer [role=alert]").count()) > 0, { what: "a new turn after the restart" });
          if (/^after-restart$/m.test(await outputText(page))) break;
          const msg = await page.locator(".composer [role=alert]").innerText();
          assert.ok(ok && /another server/.test(msg) && Date.now() < deadline, `sending after the restart failed: ${msg}`);
          await sleep(2000);
        }
      });
    });
  });

  it("finishes a running turn across a server restart with the executor sandbox", async (t) => {
    // Short socket paths: the executor's sockets go under $XDG_RUNTIME_DIR/agentd.
    const runDir = mkdtempSync(path.join(tmpdir(), "agentd-run-"));
    const server = new Agentd({ args: ["--sandbox", "executor"], env: { XDG_RUNTIME_DIR: runDir } });
    let id;
    try {
      await server.start();
      await withPage(t, browser, server, {}, async (page) => {
        const n = 100;
        id = await createShellSession(page, server, "executor-restart");
        await send(page, loop(n, 0.05));
        await waitFor(async () => /line 10$/m.test(await outputText(page)), { what: "line 10" });
        await server.stop("SIGKILL");
        const seenBefore = lineCounts(await outputText(page), n);
        assert.equal(seenBefore[n], 0, "the command finished before the server was killed");
        await waitFor(async () => (await page.getByTestId("connection-state").getAttribute("data-state")) === "reconnecting", { what: "reconnecting state" });
        await server.start();
        await waitFor(async () => (await page.getByTestId("connection-state").getAttribute("data-state")) === "connected", { what: "reconnect after restart", timeout: 30_000 });
        // The executor kept the command running: the turn goes on to the end.
        await waitFor(async () => new RegExp(`^line ${n}$`, "m").test(await outputText(page)), { what: `line ${n}`, timeout: 60_000 });
        await waitIdle(page);
        assert.deepEqual(lineCounts(await outputText(page), n).slice(1), new Array(n).fill(1), "every line exactly once");
        assert.equal(await page.getByTestId("notice-turn_failed").count(), 0, "the turn is not reported failed");
        const call = page.locator('[data-testid="block-tool_use"]');
        assert.equal(await call.count(), 1);
        assert.equal(await call.locator(".dot").getAttribute("aria-label"), "done");
        assert.deepEqual(await duplicateBlocks(page), []);
        // The log agrees: the turn completed, and the command's output is whole.
        const { events } = await server.api("GET", `/api/sessions/${id}/events?after=0&limit=10000`);
        const ends = events.filter((e) => e.type === "query:completed" || e.type === "query:failed");
        assert.deepEqual(ends.map((e) => e.type), ["query:completed"]);
        events.forEach((e, i) => assert.equal(e.seq, i + 1, "seqs without gap or repeat"));
        const st = await server.api("GET", `/api/sessions/${id}`);
        const result = st.blocks.find((b) => b.type === "tool_result");
        assert.equal(result?.output, Array.from({ length: n }, (_, i) => `line ${i + 1}\n`).join(""));
        assert.ok(!result.isError, "the command did not fail");
      });
    } finally {
      // The executor outlives a killed server by design: stop it through the
      // server, and make sure nothing of this test's is left running.
      if (id && server.proc) await server.api("DELETE", `/api/sessions/${id}?purge=true`).catch(() => {});
      await server.stop();
      killProcessesUsing(runDir);
      server.cleanup();
      rmSync(runDir, { recursive: true, force: true });
    }
  });

  it("interrupts a running turn with the Stop button", async (t) => {
    await withServer({}, async (server) => {
      await withPage(t, browser, server, {}, async (page) => {
        await createShellSession(page, server, "interrupt");
        await send(page, "echo started; sleep 60; echo never");
        await waitFor(async () => /^started$/m.test(await outputText(page)), { what: "the command to start" });
        await page.getByTestId("interrupt-button").click();
        await waitIdle(page, 20_000);
        assert.doesNotMatch(await outputText(page), /^never$/m);
        const notices = await page.locator('[data-testid^="notice-turn_"]').count();
        assert.ok(notices >= 1, "the interrupted turn is marked");
      });
    });
  });

  it("keeps the workspace tree live and shows files", async (t) => {
    await withServer({}, async (server) => {
      await withPage(t, browser, server, {}, async (page) => {
        await createShellSession(page, server, "files");
        await page.getByTestId("tab-workspace").click();
        await page.getByTestId("file-tree").waitFor();
        // Files created while the tab is open appear without a reload.
        await page.getByTestId("tab-conversation").click();
        await send(page, "mkdir -p sub && printf 'hello file\\n' > a.txt && echo nested > sub/b.txt && : > empty.txt");
        await waitIdle(page);
        await page.getByTestId("tab-workspace").click();
        const item = (p) => page.locator(`[data-testid="file-item"][data-path="${p}"]`);
        await item("a.txt").waitFor({ timeout: 15_000 });
        await item("sub/b.txt").waitFor({ timeout: 15_000 });
        await item("empty.txt").waitFor({ timeout: 15_000 });
        await item("a.txt").click();
        await page.getByTestId("file-viewer").filter({ hasText: "hello file" }).waitFor();
        await page.getByTestId("tab-conversation").click();
        await send(page, "rm a.txt");
        await waitIdle(page);
        await page.getByTestId("tab-workspace").click();
        await item("a.txt").waitFor({ state: "detached", timeout: 15_000 });
      });
    });
  });

  it("shows sessions created elsewhere in the live list", async (t) => {
    await withServer({}, async (server) => {
      await withPage(t, browser, server, {}, async (page) => {
        await page.goto(server.url + "/");
        await waitFor(async () => (await page.getByTestId("connection-state").getAttribute("data-state")) === "connected", { what: "connected" });
        const { sessionId } = await server.api("POST", "/api/sessions", { architecture: "shell", name: "from-rest" });
        const item = page.locator(`[data-testid="session-item"][data-session-id="${sessionId}"]`);
        await item.waitFor({ timeout: 10_000 });
        await server.api("POST", `/api/sessions/${sessionId}/messages`, { content: "sleep 1" });
        const status = item.getByTestId("session-item-status");
        await waitFor(async () => (await status.getAttribute("data-status")) === "running" && /working/.test(await status.innerText()), { what: "status running in the list", timeout: 10_000 });
        await waitFor(async () => /idle|ready/.test(await status.getAttribute("data-status")) && /ready/.test(await status.innerText()), { what: "status back to idle in the list", timeout: 15_000 });
      });
    });
  });

  it("batches deltas per frame: a block does not re-render per delta", async (t) => {
    await withServer({}, async (server) => {
      await withPage(t, browser, server, {}, async (page) => {
        await createShellSession(page, server, "batching");
        await page.evaluate(() => {
          window.__agentd.stats.deltas = 0;
          window.__agentd.stats.blockRenders.clear();
        });
        await send(page, "for i in $(seq 1 1500); do echo $i; sleep 0.001; done");
        await waitFor(async () => /^1500$/m.test(await outputText(page)), { what: "the last line", timeout: 60_000 });
        await waitIdle(page);
        const { deltas, renders } = await page.evaluate(() => ({
          deltas: window.__agentd.stats.deltas,
          renders: Math.max(0, ...window.__agentd.stats.blockRenders.values()),
        }));
        t.diagnostic(`${deltas} deltas, ${renders} renders of the busiest block`);
        if (deltas < 100) {
          t.skip(`the server coalesced the output into ${deltas} deltas; nothing to batch`);
          return;
        }
        assert.ok(renders < deltas / 2, `${renders} renders for ${deltas} deltas`);
        const lines = (await outputText(page)).split("\n").filter(Boolean);
        assert.equal(lines.length, 1500);
      });
    });
  });

  it("runs a shell in the terminal tab", async (t) => {
    await withServer({}, async (server) => {
      await withPage(t, browser, server, {}, async (page) => {
        await createShellSession(page, server, "pty");
        await page.getByTestId("tab-terminal").click();
        await waitFor(async () => (await page.getByTestId("terminal-status").innerText()) === "connected", { what: "pty connected" });
        await page.locator(".xterm").click();
        await page.keyboard.type("echo hello-$((6*7))-pty\n");
        await waitFor(
          async () => (await page.evaluate(() => document.querySelector(".xterm-rows")?.textContent ?? "")).includes("hello-42-pty"),
          { what: "the shell's output in xterm" },
        );
      });
    });
  });

  it("asks for the API key when the server requires one", async (t) => {
    await withServer({ args: ["--api-key", "sekret-e2e"] }, async (server) => {
      await withPage(t, browser, server, {}, async (page) => {
        await page.goto(server.url + "/");
        await page.getByTestId("api-key-form").waitFor();
        await page.getByTestId("api-key-input").fill("wrong");
        await page.getByTestId("api-key-submit").click();
        await page.getByRole("alert").waitFor();
        await page.getByTestId("api-key-input").fill("sekret-e2e");
        await page.getByTestId("api-key-submit").click();
        await page.getByTestId("new-session-button").waitFor();
        assert.equal(await page.evaluate(() => localStorage.getItem("agentd.apiKey")), "sekret-e2e");
        await waitFor(async () => (await page.getByTestId("connection-state").getAttribute("data-state")) === "connected", { what: "WebSocket with access_token" });
        await page.reload();
        await page.getByTestId("new-session-button").waitFor();
      });
    });
  });

  it("fits a phone-width screen (375 px)", async (t) => {
    await withServer({}, async (server) => {
      await withPage(t, browser, server, { width: 375, height: 740 }, async (page) => {
        await createShellSession(page, server, "phone");
        await send(page, "echo a-rather-long-line-$(printf 'x%.0s' $(seq 1 200))");
        await waitFor(async () => /a-rather-long-line-x+/.test(await outputText(page)), { what: "output" });
        const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        assert.ok(overflow <= 0, `page scrolls horizontally by ${overflow}px`);
        assert.ok(await page.getByTestId("composer-input").isVisible());
        await page.getByRole("button", { name: "Back to sessions" }).click();
        await page.getByTestId("session-list").waitFor();
      });
    });
  });
});
