import { describe, expect, it } from "vitest";
import { AgentdClient, AgentdError, encodePath } from "../src/index.js";

type Call = { url: string; init: RequestInit | undefined };

function client(answer: (c: Call) => Response, apiKey?: string) {
  const calls: Call[] = [];
  const c = new AgentdClient({
    baseUrl: "http://127.0.0.1:1",
    ...(apiKey ? { apiKey } : {}),
    fetch: async (url, init) => {
      const call = { url, init };
      calls.push(call);
      return answer(call);
    },
  });
  return { c, calls };
}
const json = (body: unknown, status = 200) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });

describe("AgentdClient", () => {
  it("sends the bearer key and JSON bodies", async () => {
    const { c, calls } = client(() => json({ success: true, sessionId: "s", queryId: "q1" }, 202), "secret");
    const r = await c.sendMessage("s/1", "echo hi");
    expect(r.queryId).toBe("q1");
    expect(calls[0]!.url).toBe("http://127.0.0.1:1/api/sessions/s%2F1/messages");
    const h = calls[0]!.init!.headers as Record<string, string>;
    expect(h.Authorization).toBe("Bearer secret");
    expect(JSON.parse(calls[0]!.init!.body as string)).toEqual({ content: "echo hi" });
  });

  it("sends content parts, uploads files raw and reads artifacts by ranges", async () => {
    const content = new TextEncoder().encode("0123456789abcdefghij"); // 20 bytes
    const { c, calls } = client((call) => {
      if (call.url.includes("/artifacts/")) {
        const m = /bytes=(\d+)-(\d+)/.exec((call.init!.headers as Record<string, string>).Range ?? "");
        const [a, b] = [Number(m![1]), Number(m![2])];
        return new Response(content.slice(a, b + 1), { status: 206 });
      }
      if (call.init?.method === "PUT") return json({ path: "a/b.txt", size: 3, mode: 420, isDir: false, modTime: "2026-01-01T00:00:00Z" });
      return json({ success: true, sessionId: "s", queryId: "q1" }, 202);
    }, "k");
    await c.sendMessage("s", [{ type: "image", source: { type: "base64", mediaType: "image/png", data: "iVBORw0KGgo=" } }, { type: "text", text: "look" }]);
    expect(JSON.parse(calls[0]!.init!.body as string)).toEqual({
      content: [{ type: "image", source: { type: "base64", mediaType: "image/png", data: "iVBORw0KGgo=" } }, { type: "text", text: "look" }],
    });
    const f = await c.putFile("s", "a/b.txt", "abc");
    expect(f.path).toBe("a/b.txt");
    expect(calls[1]!.url).toBe("http://127.0.0.1:1/api/sessions/s/files/a/b.txt");
    expect((calls[1]!.init!.headers as Record<string, string>)["Content-Type"]).toBe("application/octet-stream");
    expect(calls[1]!.init!.body).toBe("abc");
    const seen: number[] = [];
    const got = await c.fetchArtifact("s", { sha256: "ab".repeat(32), size: 20 }, { chunkSize: 8, onProgress: (n) => seen.push(n) });
    expect(new TextDecoder().decode(got)).toBe("0123456789abcdefghij");
    expect(seen).toEqual([8, 16, 20]);
    expect(calls.slice(2).map((x) => (x.init!.headers as Record<string, string>).Range)).toEqual(["bytes=0-7", "bytes=8-15", "bytes=16-19"]);
  });

  it("maps error bodies to AgentdError with code and status", async () => {
    const { c } = client(() => json({ error: "a turn is running", code: "SESSION_BUSY" }, 409));
    const err = await c.sendMessage("s", "x").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AgentdError);
    expect(err).toMatchObject({ status: 409, code: "SESSION_BUSY", message: "a turn is running" });
  });

  it("copes with a non-JSON error body", async () => {
    const { c } = client(() => new Response("gateway exploded", { status: 502, statusText: "Bad Gateway" }));
    await expect(c.listSessions()).rejects.toMatchObject({ status: 502, code: "HTTP_502", message: "gateway exploded" });
  });

  it("builds every route", async () => {
    const { c, calls } = client((call) => {
      if (call.url.includes("/files/")) return new Response("bytes");
      return json({ profiles: [], architectures: [], sessions: [], files: [], events: [], lastSeq: 0, success: true, required: false });
    });
    await c.auth();
    await c.listProfiles();
    await c.listArchitectures();
    await c.createSession({ architecture: "shell" });
    await c.listSessions();
    await c.getSession("s");
    await c.interrupt("s");
    await c.answerPermission("s", "r 1", { behavior: "deny", message: "no" });
    await c.listFiles("s");
    expect(await (await c.readFile("s", "dir/a b#.txt")).text()).toBe("bytes");
    await c.getEvents("s", { after: 3, limit: 10 });
    await c.deleteSession("s", { purge: true });
    expect(calls.map((x) => `${x.init!.method} ${x.url.replace("http://127.0.0.1:1", "")}`)).toEqual([
      "GET /api/auth",
      "GET /api/agent-profiles",
      "GET /api/architectures",
      "POST /api/sessions",
      "GET /api/sessions",
      "GET /api/sessions/s",
      "POST /api/sessions/s/interrupt",
      "POST /api/sessions/s/permissions/r%201",
      "GET /api/sessions/s/files",
      "GET /api/sessions/s/files/dir/a%20b%23.txt",
      "GET /api/sessions/s/events?after=3&limit=10",
      "DELETE /api/sessions/s?purge=true",
    ]);
  });

  it("builds the identity routes, escaping ids", async () => {
    const { c, calls } = client(() => json({ users: [], tokens: [], shares: [], keys: [], budgets: [], records: [], last: 0, success: true }));
    await c.me();
    await c.listUsers();
    await c.createUser({ id: "a/b" });
    await c.getUser("a/b");
    await c.updateUser("a/b", { disabled: true });
    await c.createToken({ name: "ci" });
    await c.listTokens();
    await c.listTokens({ user: "*" });
    await c.revokeToken("t 1");
    await c.listShares("s");
    await c.putShare("s", "u#1", "control");
    await c.deleteShare("s", "u#1");
    await c.listProviderKeys("tenant", "team a");
    await c.putProviderKey("user", "u", "anthropic", "sk");
    await c.deleteProviderKey("user", "u", "anthropic");
    await c.listBudgets();
    await c.getBudget("user", "u");
    await c.putBudget("tenant", "t", { tokensPerDay: 5 });
    await c.deleteBudget("tenant", "t");
    await c.accessLog({ after: 7, limit: 2 });
    await c.oidcToken("c", "v", "http://x/auth/callback");
    await c.oidcRefresh("r");
    expect(calls.map((x) => `${x.init!.method} ${x.url.replace("http://127.0.0.1:1", "")}`)).toEqual([
      "GET /api/me",
      "GET /api/users",
      "POST /api/users",
      "GET /api/users/a%2Fb",
      "PATCH /api/users/a%2Fb",
      "POST /api/tokens",
      "GET /api/tokens",
      "GET /api/tokens?user=*",
      "DELETE /api/tokens/t%201",
      "GET /api/sessions/s/shares",
      "PUT /api/sessions/s/shares/u%231",
      "DELETE /api/sessions/s/shares/u%231",
      "GET /api/keys/tenant/team%20a",
      "PUT /api/keys/user/u/anthropic",
      "DELETE /api/keys/user/u/anthropic",
      "GET /api/budgets",
      "GET /api/budgets/user/u",
      "PUT /api/budgets/tenant/t",
      "DELETE /api/budgets/tenant/t",
      "GET /api/access-log?after=7&limit=2",
      "POST /api/auth/oidc/token",
      "POST /api/auth/oidc/refresh",
    ]);
    const body = (i: number) => JSON.parse(calls[i]!.init!.body as string) as unknown;
    expect(body(10)).toEqual({ access: "control" });
    expect(body(13)).toEqual({ key: "sk" });
    expect(body(17)).toEqual({ tokensPerDay: 5, scope: "tenant", owner: "t" });
    expect(body(20)).toEqual({ code: "c", codeVerifier: "v", redirectUri: "http://x/auth/callback" });
  });

  it("builds the queue, rename, changes and archive routes, each write with a JSON Content-Type", async () => {
    const { c, calls } = client((call) => {
      if (call.url.includes("/content/")) return new Response("old");
      return json({ messages: [{ id: "m1", content: "x" }], success: true, turns: [], overall: [], sessionId: "s", name: "n", queued: true, messageId: "m2" });
    }, "k");
    const sent = await c.sendMessage("s", "later", { queue: true });
    expect(sent).toMatchObject({ queued: true, messageId: "m2" });
    await c.sendMessage("s", "now", { queue: false });
    expect((await c.listQueue("s"))[0]!.id).toBe("m1");
    await c.cancelQueued("s", "m 1");
    await c.renameSession("s", "n");
    await c.getChanges("s");
    expect(await (await c.changedContent("s", "ab")).text()).toBe("old");
    await c.deleteSession("s");
    expect(calls.map((x) => `${x.init!.method} ${x.url.replace("http://127.0.0.1:1", "")}`)).toEqual([
      "POST /api/sessions/s/messages",
      "POST /api/sessions/s/messages",
      "GET /api/sessions/s/queue",
      "DELETE /api/sessions/s/queue/m%201",
      "PATCH /api/sessions/s",
      "GET /api/sessions/s/changes",
      "GET /api/sessions/s/changes/content/ab",
      "DELETE /api/sessions/s",
    ]);
    expect(JSON.parse(calls[0]!.init!.body as string)).toEqual({ content: "later" });
    expect(JSON.parse(calls[1]!.init!.body as string)).toEqual({ content: "now", queue: false });
    for (const call of calls) {
      const h = call.init!.headers as Record<string, string>;
      if (call.init!.method !== "GET") expect(h["Content-Type"], `${call.init!.method} ${call.url}`).toBe("application/json");
    }
    expect(c.archiveUrl("s", "tar.gz")).toBe("http://127.0.0.1:1/api/sessions/s/archive?format=tar.gz&access_token=k");
  });

  it("builds the options, sync, environment and content routes", async () => {
    const { c, calls } = client(() => json({ success: true, sessionId: "s", sessionOptions: { model: "m" }, files: { saved: 1, deleted: 0, unchanged: 0, skipped: 0 }, transcripts: [], runtime: { status: "terminated", architecture: "shell" } }));
    expect((await c.updateOptions("s", { model: "m", permissionMode: null })).sessionOptions).toEqual({ model: "m" });
    expect((await c.syncSession("s")).files.saved).toBe(1);
    expect((await c.terminateEnvironment("s")).runtime.status).toBe("terminated");
    await c.getSession("s", { content: true });
    expect(calls.map((x) => `${x.init!.method} ${x.url.replace("http://127.0.0.1:1", "")}`)).toEqual([
      "PATCH /api/sessions/s/options",
      "POST /api/sessions/s/sync",
      "POST /api/sessions/s/environment/terminate",
      "GET /api/sessions/s?include=content",
    ]);
    expect(JSON.parse(calls[0]!.init!.body as string)).toEqual({ sessionOptions: { model: "m", permissionMode: null } });
    expect(calls[1]!.init!.body).toBeUndefined();
  });

  it("encodes paths segment by segment", () => {
    expect(encodePath("/a//b c/ü?.md")).toBe("a/b%20c/%C3%BC%3F.md");
    expect(encodePath("..")).toBe("..");
  });

  it("adds access_token to SSE and PTY URLs", () => {
    const { c } = client(() => json({}), "k");
    expect(c.eventsStreamUrl("s", 4)).toBe("http://127.0.0.1:1/api/sessions/s/events?after=4&access_token=k");
    expect(c.wsUrl("/api/sessions/s/pty", { rows: 24, cols: 80 })).toBe("ws://127.0.0.1:1/api/sessions/s/pty?rows=24&cols=80&access_token=k");
  });
});
