// The identity routes through AgentdClient against a real agentd
// (AGENTD_BIN): users, tokens, shares, provider keys, budgets and the
// access log, as an admin (the --api-key) and as a member with its token.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AgentdClient, AgentdError } from "../src/index.js";

const bin = process.env.AGENTD_BIN;
const ADMIN_KEY = "admin-key-for-identity-test";
const PROVIDER_KEY = "sk-ant-identity-test-0123456789abcdef";

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

describe.skipIf(!bin)("identity routes against agentd", { timeout: 60_000 }, () => {
  let proc: ChildProcess;
  let dir: string;
  let base: string;
  let admin: AgentdClient;
  const log: string[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), "agentd-ts-identity-"));
    const keyFile = path.join(dir, "server.key");
    writeFileSync(keyFile, "11".repeat(32), { mode: 0o600 });
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    proc = spawn(bin!, ["serve", "--addr", `127.0.0.1:${port}`, "--data-dir", path.join(dir, "data"), "--api-key", ADMIN_KEY, "--server-key-file", keyFile], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    proc.stdout!.on("data", (d) => log.push(String(d)));
    proc.stderr!.on("data", (d) => log.push(String(d)));
    admin = new AgentdClient({ baseUrl: base, apiKey: ADMIN_KEY });
    for (let i = 0; ; i++) {
      try {
        await admin.health();
        break;
      } catch (e) {
        if (i > 300 || proc.exitCode !== null) throw new Error(`agentd did not start: ${String(e)}\n${log.join("")}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  });

  afterAll(() => {
    proc?.kill("SIGKILL");
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("says how to authenticate", async () => {
    const info = await new AgentdClient({ baseUrl: base }).auth();
    expect(info).toMatchObject({ required: true, multiUser: true });
    expect(info.methods).toContain("token");
    expect(info.oidc).toBeUndefined();
  });

  it("manages users, tokens, shares, keys and budgets", async () => {
    const me = await admin.me();
    expect(me.admin).toBe(true);
    expect(me.method).toBe("api-key");

    const alice = await admin.createUser({ id: "alice", name: "Alice", tenant: "team-a" });
    expect(alice).toMatchObject({ id: "alice", name: "Alice", tenant: "team-a", role: "member" });
    await admin.createUser({ id: "bob", tenant: "team-a" });
    expect((await admin.updateUser("alice", { name: "Alice A." })).name).toBe("Alice A.");
    expect((await admin.getUser("alice")).name).toBe("Alice A.");
    expect((await admin.listUsers()).map((u) => u.id)).toEqual(expect.arrayContaining(["alice", "bob"]));

    // A token for alice: its secret only in this answer, and it works.
    const created = await admin.createToken({ userId: "alice", name: "laptop", expiresIn: 3600 });
    expect(created.token).toMatch(/^agd_/);
    expect(created).toMatchObject({ userId: "alice", name: "laptop" });
    expect(created.expiresAt).toBeTruthy();
    const asAlice = new AgentdClient({ baseUrl: base, apiKey: created.token });
    const aliceMe = await asAlice.me();
    expect(aliceMe).toMatchObject({ method: "token", tokenId: created.id, admin: false, user: { id: "alice", tenant: "team-a" } });
    expect((await asAlice.listTokens()).map((t) => t.id)).toEqual([created.id]);
    expect((await admin.listTokens({ user: "alice" })).map((t) => t.id)).toEqual([created.id]);
    // A member is refused the admin routes.
    await expect(asAlice.listUsers()).rejects.toMatchObject({ status: 403 });
    await expect(asAlice.createUser({ id: "mallory" })).rejects.toBeInstanceOf(AgentdError);

    // Shares of alice's own session.
    const { sessionId } = await asAlice.createSession({ architecture: "shell" });
    expect(await asAlice.listShares(sessionId)).toEqual([]);
    const share = await asAlice.putShare(sessionId, "bob", "read");
    expect(share).toMatchObject({ sessionId, userId: "bob", access: "read" });
    expect((await asAlice.listShares(sessionId)).map((s) => [s.userId, s.access])).toEqual([["bob", "read"]]);
    expect((await asAlice.deleteShare(sessionId, "bob")).success).toBe(true);
    expect(await asAlice.listShares(sessionId)).toEqual([]);

    // Provider keys: stored, listed without the key, removed.
    const pk = await asAlice.putProviderKey("user", "alice", "anthropic", PROVIDER_KEY);
    expect(pk).toMatchObject({ scope: "user", owner: "alice", provider: "anthropic" });
    const keys = await asAlice.listProviderKeys("user", "alice");
    expect(keys.map((k) => k.provider)).toEqual(["anthropic"]);
    expect(JSON.stringify(keys)).not.toContain(PROVIDER_KEY);
    expect((await asAlice.deleteProviderKey("user", "alice", "anthropic")).success).toBe(true);
    expect(await asAlice.listProviderKeys("user", "alice")).toEqual([]);

    // Budgets: an admin sets one, alice reads hers.
    const b = await admin.putBudget("user", "alice", { tokensPerDay: 1000, costPerMonthMicros: 5_000_000 });
    expect(b).toMatchObject({ scope: "user", owner: "alice", tokensPerDay: 1000, costPerMonthMicros: 5_000_000 });
    expect(await admin.listBudgets()).toEqual(expect.arrayContaining([expect.objectContaining({ scope: "user", owner: "alice", tokensPerDay: 1000 })]));
    const rep = await asAlice.getBudget("user", "alice");
    expect(rep.budget.tokensPerDay).toBe(1000);
    expect(rep.day).toEqual({ tokens: 0, costMicros: 0 });
    await expect(asAlice.putBudget("user", "alice", { tokensPerDay: 1e9 })).rejects.toMatchObject({ status: 403 });
    expect((await admin.deleteBudget("user", "alice")).success).toBe(true);
    expect((await admin.listBudgets()).filter((x) => x.owner === "alice")).toEqual([]);

    // Revoking the token cuts alice off at once.
    const revoked = await admin.revokeToken(created.id);
    expect(revoked.revokedAt).toBeTruthy();
    await expect(asAlice.me()).rejects.toMatchObject({ status: 401 });

    // The access log recorded the user made and the refusals, in pages.
    const page = await admin.accessLog({ limit: 1000 });
    const kinds = page.records.map((r) => r.kind);
    expect(kinds).toContain("user_created");
    expect(page.last).toBe(page.records.at(-1)!.id);
    const rest = await admin.accessLog({ after: page.records[0]!.id, limit: 1 });
    expect(rest.records.map((r) => r.id)).toEqual([page.records[1]!.id]);
  });

  it("refuses a bad OIDC exchange on a server without a provider", async () => {
    await expect(new AgentdClient({ baseUrl: base }).oidcToken("code", "verifier", "http://127.0.0.1/auth/callback")).rejects.toBeInstanceOf(AgentdError);
  });
});
