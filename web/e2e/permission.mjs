// Permission Allow/Deny through the UI. Needs the claude-code architecture
// (the `claude` CLI on the server's PATH) and agentd's mock-llm as the model.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Agentd, agentdBin, freePort, here, send, sleep, waitFor, withPage } from "./harness.mjs";

// Each call's result tells the two "done" rules apart: an allowed call runs
// and prints its marker; a denied one comes back as an error result.
const SCRIPT = `
rules:
  - name: allow-call
    match: { userContains: "PERM-ALLOW", noToolResult: true }
    reply:
      content:
        - name: Bash
          input: { command: "echo allowed-ran | tee allowed.txt", description: "write allowed.txt" }
      stopReason: tool_use
  - name: allow-done
    match: { toolResult: { name: Bash, contains: "allowed-ran" } }
    reply: { text: "finished the allowed call" }
  - name: deny-call
    match: { userContains: "PERM-DENY", noToolResult: true }
    reply:
      content:
        - name: Bash
          input: { command: "echo denied-ran | tee denied.txt", description: "write denied.txt" }
      stopReason: tool_use
  - name: deny-done
    match: { toolResult: { name: Bash, isError: true } }
    reply: { text: "finished the denied call" }
default:
  text: "ok"
`;

async function startMockLLM() {
  const port = await freePort();
  const dir = mkdtempSync(path.join(tmpdir(), "mockllm-"));
  const script = path.join(dir, "script.yaml");
  writeFileSync(script, SCRIPT);
  const proc = spawn(agentdBin(), ["mock-llm", "--addr", `127.0.0.1:${port}`, "--script", script], { stdio: ["ignore", "pipe", "pipe"] });
  const log = [];
  proc.stdout.on("data", (d) => log.push(String(d)));
  proc.stderr.on("data", (d) => log.push(String(d)));
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 100; i++) {
    if (proc.exitCode !== null) throw new Error("mock-llm exited: " + log.join(""));
    try {
      await fetch(url + "/_mockllm/requests");
      return { url, stop: () => proc.kill("SIGKILL"), log };
    } catch {
      await sleep(100);
    }
  }
  proc.kill("SIGKILL");
  throw new Error("mock-llm did not start: " + log.join(""));
}

export async function permissionTest(t, browser) {
  const agentsBin = path.resolve(here, "../../tools/agents/node_modules/.bin");
  const PATH = (existsSync(agentsBin) ? agentsBin + ":" : "") + process.env.PATH;
  // Probe first: without claude-code there is nothing to test.
  const probe = new Agentd({ env: { PATH } });
  let cc;
  try {
    await probe.start();
    const { architectures } = await probe.api("GET", "/api/architectures");
    cc = architectures.find((a) => a.name === "claude-code" || (a.aliases ?? []).includes("claude-code"));
  } finally {
    await probe.stop();
    probe.cleanup();
  }
  if (!cc?.available) {
    t.skip("claude-code architecture unavailable on this server (no claude CLI on PATH): permission Allow/Deny not exercised");
    return;
  }
  const mock = await startMockLLM();
  const server = new Agentd({ env: { ANTHROPIC_BASE_URL: mock.url, ANTHROPIC_API_KEY: "mock-key", PATH } });
  try {
    await server.start();
    await withPage(t, browser, server, {}, async (page) => {
      await page.goto(server.url + "/");
      await page.getByTestId("new-session-button").click();
      await page.getByTestId("architecture-select").selectOption(cc.name, { timeout: 90_000 });
      await page.getByTestId("create-session").click();
      await page.getByTestId("session-view").waitFor();

      // Allow: the tool runs and its output shows.
      await send(page, "PERM-ALLOW please write the file");
      const req = page.getByTestId("permission-request");
      await req.waitFor({ timeout: 60_000 });
      assert.match(await req.innerText(), /Bash/);
      const c1 = await page.getByTestId("permission-countdown").innerText();
      await sleep(1200);
      const c2 = await page.getByTestId("permission-countdown").innerText();
      assert.notEqual(c1, c2, "countdown is live");
      await page.getByTestId("permission-allow").click();
      await req.waitFor({ state: "detached", timeout: 30_000 });
      await page.getByText("finished the allowed call").waitFor({ timeout: 60_000 });

      // Deny: the request disappears and the agent goes on without running it.
      await waitFor(async () => (await page.getByTestId("send-button").count()) === 1, { what: "idle" });
      await send(page, "PERM-DENY please write another file");
      await req.waitFor({ timeout: 60_000 });
      await page.getByTestId("permission-deny").click();
      await req.waitFor({ state: "detached", timeout: 30_000 });
      await page.getByText("finished the denied call").waitFor({ timeout: 60_000 });
      const files = await server.api("GET", `/api/sessions/${await page.getByTestId("session-view").getAttribute("data-session-id")}/files`);
      const names = files.files.map((f) => f.path);
      assert.ok(names.includes("allowed.txt"), "the allowed call ran");
      assert.ok(!names.includes("denied.txt"), "the denied call did not run");
    });
  } finally {
    await server.stop();
    server.cleanup();
    mock.stop();
  }
}
