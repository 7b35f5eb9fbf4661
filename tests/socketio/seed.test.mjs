// An application written against the seed's client (agent-runtime's
// RestClient and WebSocketManager: the protocol of its README and client
// code) pointed at agentd, with the stock socket.io-client. The only change
// is the address it is given: the Socket.IO URL carries ?events=per-type,
// so the client's code receives the per-type events it listens to. The
// conversation it builds by the seed's reducer rules (restated below, in
// this test's own code) must equal agentd's GET /api/sessions/{id}.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { io } from "socket.io-client";

const bin = process.env.AGENTD_BIN;
if (!bin) throw new Error("set AGENTD_BIN to the agentd binary");

const KEY = "seed-key";

async function startServer(extra = []) {
  const dir = mkdtempSync(join(tmpdir(), "agentd-seed-"));
  const proc = spawn(bin, ["serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--no-ui", ...extra], { stdio: ["ignore", "ignore", "pipe"] });
  const url = await new Promise((resolve, reject) => {
    let buf = "";
    proc.stderr.on("data", (d) => {
      buf += d;
      const m = buf.match(/agentd listening on (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    proc.on("exit", (code) => reject(new Error(`agentd exited ${code}: ${buf}`)));
  });
  return { url, stop: () => { proc.kill("SIGTERM"); rmSync(dir, { recursive: true, force: true }); } };
}

// ---- the seed's client, as its code talks to a server ----------------------

// RestClient: JSON content type and the bearer key on every request, body or not.
class SeedRest {
  constructor(baseUrl, apiKey) { this.baseUrl = baseUrl.replace(/\/$/, ""); this.apiKey = apiKey; }
  async request(endpoint, options = {}) {
    const res = await fetch(this.baseUrl + endpoint, {
      ...options,
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${this.apiKey}`, ...options.headers },
    });
    const body = await res.json().catch(() => ({ error: res.statusText, code: `HTTP_${res.status}` }));
    if (!res.ok) throw Object.assign(new Error(body.error || `HTTP ${res.status}`), { status: res.status, code: body.code });
    return body;
  }
  createSession(agentProfileRef, architecture) { return this.request("/api/sessions", { method: "POST", body: JSON.stringify({ agentProfileRef, architecture }) }); }
  listSessions() { return this.request("/api/sessions").then((r) => r.sessions); }
  getSession(id) { return this.request(`/api/sessions/${id}`); }
  destroySession(id) { return this.request(`/api/sessions/${id}`, { method: "DELETE" }); }
  syncSession(id) { return this.request(`/api/sessions/${id}/sync`, { method: "POST" }); }
  sendMessage(id, content) { return this.request(`/api/sessions/${id}/messages`, { method: "POST", body: JSON.stringify({ content }) }); }
  updateSessionOptions(id, sessionOptions) { return this.request(`/api/sessions/${id}/options`, { method: "PATCH", body: JSON.stringify({ sessionOptions }) }); }
  terminateEnvironment(id) { return this.request(`/api/sessions/${id}/environment/terminate`, { method: "POST" }); }
}

// WebSocketManager: io(wsUrl, its options); join and leave check response.success.
class SeedSocket {
  constructor(wsUrl) { this.wsUrl = wsUrl; }
  connect() {
    this.socket = io(this.wsUrl, { transports: ["websocket", "polling"], reconnection: true, reconnectionDelay: 1000, reconnectionAttempts: 5 });
    return new Promise((resolve, reject) => {
      this.socket.once("connect", resolve);
      this.socket.once("connect_error", (e) => { this.socket.close(); reject(e); });
    });
  }
  joinSession(id) {
    return new Promise((resolve, reject) => {
      this.socket.emit("session:join", id, (response) => {
        if (response.success) resolve(response);
        else reject(Object.assign(new Error(response.error || "Failed to join session"), { response }));
      });
    });
  }
  leaveSession(id) {
    return new Promise((resolve, reject) => {
      this.socket.emit("session:leave", id, (response) => (response.success ? resolve(response) : reject(new Error("Failed to leave session"))));
    });
  }
  close() { this.socket?.close(); }
}

// ---- the seed's reducer rules (its client's context/reducer.ts), restated ----

function seedState() { return { sessions: new Map() }; }

function seedReduce(state, a) {
  const sessions = new Map(state.sessions);
  const s = sessions.get(a.sessionId);
  const inThread = (fn) => {
    if (!s) return state;
    if (a.conversationId === "main") sessions.set(a.sessionId, { ...s, blocks: fn(s.blocks) });
    else {
      const sub = s.subagents.get(a.conversationId);
      if (!sub) return state; // a block of an unknown subagent is dropped
      const subs = new Map(s.subagents);
      subs.set(a.conversationId, { ...sub, blocks: fn(sub.blocks) });
      sessions.set(a.sessionId, { ...s, subagents: subs });
    }
    return { ...state, sessions };
  };
  switch (a.type) {
    case "SESSION_CREATED":
      sessions.set(a.session.sessionId, { info: a.session, blocks: [], files: [], subagents: new Map() });
      return { ...state, sessions };
    case "SESSION_LOADED":
      sessions.set(a.sessionId, {
        info: a.data, blocks: a.data.blocks, files: a.data.workspaceFiles,
        subagents: new Map(a.data.subagents.map((x) => [x.id, { id: x.id, blocks: x.blocks }])),
      });
      return { ...state, sessions };
    case "SESSION_STATUS_CHANGED":
      if (s) sessions.set(a.sessionId, { ...s, info: { ...s.info, status: a.status } });
      return { ...state, sessions };
    case "BLOCK_STARTED": return inThread((bs) => [...bs, a.block]);
    case "BLOCK_DELTA":
      // Deltas extend the content of assistant_text and thinking blocks only.
      return inThread((bs) => bs.map((b) => (b.id === a.blockId && (b.type === "assistant_text" || b.type === "thinking") ? { ...b, content: b.content + a.delta } : b)));
    case "BLOCK_UPDATED": return inThread((bs) => bs.map((b) => (b.id === a.blockId ? { ...b, ...a.updates } : b)));
    case "BLOCK_COMPLETED": return inThread((bs) => bs.map((b) => (b.id === a.blockId ? a.block : b)));
    case "SUBAGENT_DISCOVERED": {
      if (!s) return state;
      const subs = new Map(s.subagents);
      subs.set(a.subagent.id, { id: a.subagent.id, blocks: a.subagent.blocks, status: "running" });
      sessions.set(a.sessionId, { ...s, subagents: subs });
      return { ...state, sessions };
    }
    case "FILE_CREATED":
    case "FILE_MODIFIED": {
      if (!s) return state;
      const files = [...s.files];
      const i = files.findIndex((f) => f.path === a.file.path);
      if (i >= 0) files[i] = a.file; else files.push(a.file);
      sessions.set(a.sessionId, { ...s, files });
      return { ...state, sessions };
    }
    case "FILE_DELETED":
      if (s) sessions.set(a.sessionId, { ...s, files: s.files.filter((f) => f.path !== a.path) });
      return { ...state, sessions };
    default:
      return state;
  }
}

// The seed's provider: the events it listens to, dispatched to its reducer.
// Everything received is also kept, in order, for the test's checks.
function attach(sock, store) {
  const on = (name, toAction) => sock.socket.on(name, (d) => {
    store.received.push({ name, data: d });
    const a = toAction(d);
    if (a) store.state = seedReduce(store.state, a);
  });
  on("session:block:start", (d) => ({ type: "BLOCK_STARTED", ...d }));
  on("session:block:delta", (d) => ({ type: "BLOCK_DELTA", ...d }));
  on("session:block:update", (d) => ({ type: "BLOCK_UPDATED", ...d }));
  on("session:block:complete", (d) => ({ type: "BLOCK_COMPLETED", ...d }));
  on("session:metadata:update", () => null);
  on("session:subagent:discovered", (d) => ({ type: "SUBAGENT_DISCOVERED", ...d }));
  on("session:subagent:completed", () => null);
  on("session:file:created", (d) => ({ type: "FILE_CREATED", ...d }));
  on("session:file:modified", (d) => ({ type: "FILE_MODIFIED", ...d }));
  on("session:file:deleted", (d) => ({ type: "FILE_DELETED", ...d }));
  on("session:status", (d) => ({ type: "SESSION_STATUS_CHANGED", ...d }));
  on("error", () => null);
  // What the seed had no event for arrives as agentd's envelope.
  on("session:event", () => null);
}

function waitFor(store, pred, what, ms = 20000) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const tick = () => {
      const hit = store.received.find(pred);
      if (hit) return resolve(hit);
      if (Date.now() - t0 > ms) return reject(new Error(`timed out waiting for ${what}; got ${store.received.map((r) => r.name).join(",")}`));
      setTimeout(tick, 10);
    };
    tick();
  });
}

const turnEnded = (queryId) => (r) => r.name === "session:event" && r.data.type === "query:completed" && r.data.payload.queryId === queryId;

// dropNull: the seed's merge keeps a null an update sent for a field agentd omits.
const dropNull = (v) => JSON.parse(JSON.stringify(v, (_, x) => (x === null ? undefined : x)));

// The conversation the seed client holds equals agentd's.
async function assertSameConversation(rest, store, id) {
  const agentd = await rest.getSession(id);
  const mine = store.state.sessions.get(id);
  assert.deepEqual(dropNull(mine.blocks), dropNull(agentd.blocks), "main blocks");
  assert.deepEqual([...mine.subagents.keys()], agentd.subagents.map((s) => s.id), "subagents");
  for (const s of agentd.subagents) assert.deepEqual(dropNull(mine.subagents.get(s.id).blocks), dropNull(s.blocks), `subagent ${s.id}`);
  assert.deepEqual(mine.files.map((f) => f.path).sort(), agentd.workspaceFiles.map((f) => f.path).sort(), "files");
  return { agentd, mine };
}

let srv;
before(async () => { srv = await startServer(["--api-key", KEY]); });
after(() => srv.stop());

test("the seed's client, unchanged, against agentd", async () => {
  const rest = new SeedRest(srv.url, KEY);
  // Its Socket.IO URL: the per-type events and the key, in the query.
  const wsUrl = `${srv.url}/?events=per-type&access_token=${KEY}`;

  // Create (the client's POST /api/sessions; the README's POST /sessions/create and POST /sessions too).
  const created = await rest.createSession("default", "shell");
  assert.equal(created.status, "created");
  for (const path of ["/sessions/create", "/sessions"]) {
    const other = await rest.request(path, { method: "POST", body: JSON.stringify({ agentProfileRef: "default", architecture: "shell" }) });
    assert.ok(other.sessionId, path);
  }
  const id = created.sessionId;
  assert.ok((await rest.listSessions()).some((s) => s.sessionId === id));

  const store = { state: seedState(), received: [] };
  store.state = seedReduce(store.state, { type: "SESSION_CREATED", session: { sessionId: id, type: "shell", agentProfileReference: "default", status: created.status, createdAt: created.createdAt } });
  const sock = new SeedSocket(wsUrl);
  await sock.connect();
  attach(sock, store);
  try {
    const ack = await sock.joinSession(id);
    assert.equal(ack.success, true);
    assert.equal(ack.ok, true);
    assert.equal(typeof ack.lastSeq, "number");

    // A turn: shell output streams into a tool_result, a file is written.
    const sent = await rest.sendMessage(id, "echo one; printf 'two\\n'; printf 'hello seed\\n' > notes.txt; echo three");
    assert.equal(sent.success, true);
    await waitFor(store, turnEnded(sent.queryId), "the first turn's end");
    const names = new Set(store.received.map((r) => r.name));
    for (const n of ["session:block:start", "session:block:update", "session:status", "session:file:created", "session:event"]) assert.ok(names.has(n), `no ${n}: ${[...names]}`);
    const { agentd } = await assertSameConversation(rest, store, id);
    const result = agentd.blocks.find((b) => b.type === "tool_result");
    assert.equal(result.output, "one\ntwo\nthree\n");
    // The started tool_result had every field the seed's type requires.
    const started = store.received.find((r) => r.name === "session:block:start" && r.data.block.type === "tool_result").data.block;
    for (const k of ["id", "timestamp", "toolUseId", "output", "isError"]) assert.ok(k in started, `started tool_result lacks ${k}`);
    // The file arrived as the seed's {path, content}.
    const file = store.received.find((r) => r.name === "session:file:created" && r.data.file.path === "notes.txt");
    assert.equal(file.data.file.content, "hello seed\n");
    assert.equal(file.data.sessionId, id);
    // One log, one order: seqs never go back.
    const seqs = store.received.map((r) => r.data.seq).filter((s) => typeof s === "number");
    assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b));

    // A second client of the seed's: loads the session, then joins for what follows.
    const store2 = { state: seedState(), received: [] };
    store2.state = seedReduce(store2.state, { type: "SESSION_LOADED", sessionId: id, data: await rest.getSession(id) });
    const sock2 = new SeedSocket(wsUrl);
    await sock2.connect();
    attach(sock2, store2);
    try {
      assert.equal((await sock2.joinSession(id)).success, true);

      // Options: set for the next start, announced to every client.
      const upd = await rest.updateSessionOptions(id, { model: "m-seed" });
      assert.deepEqual(upd, { success: true, sessionId: id, sessionOptions: { model: "m-seed" } });
      await waitFor(store2, (r) => r.name === "session:event" && r.data.type === "options:update", "options:update");
      await assert.rejects(rest.updateSessionOptions(id, { temperature: 2 }), (e) => e.status === 400 && e.code === "UNKNOWN_OPTION");

      // Sync: the workspace's copies are in the store now.
      const sync = await rest.syncSession(id);
      assert.equal(sync.success, true);
      assert.equal(sync.sessionId, id);
      assert.ok(sync.files.saved + sync.files.unchanged >= 1, JSON.stringify(sync));

      // Environment terminate: the session stays, the next message restarts it.
      const term = await rest.terminateEnvironment(id);
      assert.equal(term.success, true);
      assert.equal(term.sessionId, id);
      assert.equal(term.runtime.status, "terminated");
      await waitFor(store2, (r) => r.name === "session:status" && r.data.status === "terminated", "the terminated status");
      const again = await rest.sendMessage(id, "cat notes.txt; rm notes.txt");
      await waitFor(store2, turnEnded(again.queryId), "the turn after terminate");
      await waitFor(store, turnEnded(again.queryId), "the turn after terminate (first client)");
      await waitFor(store, (r) => r.name === "session:file:deleted" && r.data.path === "notes.txt", "the deletion");
      await assertSameConversation(rest, store, id);
      await assertSameConversation(rest, store2, id);
      // The status after the turn reached the seed's session info too.
      const end = await waitFor(store, turnEnded(again.queryId), "the turn's end");
      await waitFor(store, (r) => r.name === "session:status" && r.data.seq > end.data.seq && r.data.status === "idle", "the idle status");
      assert.equal(store.state.sessions.get(id).info.status, "idle");

      // Leave; leaving again succeeds too, as the seed's did.
      assert.equal((await sock2.leaveSession(id)).success, true);
      assert.equal((await sock2.leaveSession(id)).success, true);
    } finally {
      sock2.close();
    }

    // A client that resumes: joins with the last seq it had (after), and
    // gets exactly the per-type events of what followed.
    const store3 = { state: seedState(), received: [] };
    const snap = await rest.getSession(id);
    store3.state = seedReduce(store3.state, { type: "SESSION_LOADED", sessionId: id, data: snap });
    const sock3 = new SeedSocket(wsUrl);
    await sock3.connect();
    attach(sock3, store3);
    try {
      const before = await rest.sendMessage(id, "echo resumed");
      await waitFor(store, turnEnded(before.queryId), "a turn before the resume");
      const ack3 = await new Promise((resolve) => sock3.socket.emit("session:join", id, snap.lastSeq, resolve));
      assert.equal(ack3.success, true);
      await waitFor(store3, turnEnded(before.queryId), "the missed turn, resumed");
      await assertSameConversation(rest, store3, id);
      assert.ok(store3.received.filter((r) => typeof r.data.seq === "number").every((r) => r.data.seq > snap.lastSeq));
    } finally {
      sock3.close();
    }

    // Unknown sessions: the join fails with the seed's error string.
    await assert.rejects(sock.joinSession("no-such-session"), (e) => e.response.success === false && typeof e.response.error === "string" && e.response.code === "SESSION_NOT_FOUND");

    // Destroy: {success, sessionId}.
    assert.deepEqual(await rest.destroySession(id), { success: true, sessionId: id });
  } finally {
    sock.close();
  }
});

test("join and leave acks carry success for envelope clients too", async () => {
  const rest = new SeedRest(srv.url, KEY);
  const { sessionId } = await rest.createSession("default", "shell");
  const socket = io(srv.url, { auth: { token: KEY }, reconnection: false });
  await new Promise((resolve, reject) => { socket.once("connect", resolve); socket.once("connect_error", reject); });
  try {
    const got = [];
    socket.on("session:event", (e) => got.push(e));
    const ack = await socket.emitWithAck("session:join", sessionId);
    assert.equal(ack.ok, true);
    assert.equal(ack.success, true);
    assert.equal(typeof ack.lastSeq, "number");
    // The envelope, from seq 1 (it follows the ack).
    await waitFor({ received: got }, (e) => e.seq === 1 && e.type === "status", "the first envelope");
    const bad = await socket.emitWithAck("session:join", "nope");
    assert.equal(bad.success, false);
    assert.equal(bad.error.code, "SESSION_NOT_FOUND");
    const left = await socket.emitWithAck("session:leave", sessionId);
    assert.equal(left.success, true);
    assert.equal((await socket.emitWithAck("session:leave", sessionId)).success, false);
  } finally {
    socket.close();
  }
});

test("the per-type events are asked for in auth too; a bad value is refused", async () => {
  const rest = new SeedRest(srv.url, KEY);
  const { sessionId } = await rest.createSession("default", "shell");
  const socket = io(srv.url, { auth: { token: KEY, events: "per-type" }, reconnection: false });
  await new Promise((resolve, reject) => { socket.once("connect", resolve); socket.once("connect_error", reject); });
  try {
    const got = [];
    socket.onAny((name, d) => got.push({ name, data: d }));
    // With after 0 the whole log comes, mapped.
    assert.equal((await socket.emitWithAck("session:join", sessionId, 0)).success, true);
    await waitFor({ received: got }, (r) => r.name === "session:status" && r.data.seq === 1, "the first status");
    assert.ok(!got.some((r) => r.name === "session:event" && r.data.type === "status"), "status came as an envelope");
  } finally {
    socket.close();
  }
  const bad = io(srv.url, { auth: { token: KEY, events: "blocks" }, reconnection: false });
  await assert.rejects(new Promise((resolve, reject) => { bad.once("connect", resolve); bad.once("connect_error", reject); }), /events "blocks"/);
  bad.close();
});
