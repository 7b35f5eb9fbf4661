// An unmodified socket.io-client 4.x against a real agentd: connect (polling
// and websocket), join a session with an ack, receive session:event
// envelopes in seq order, resume with `after`, and auth.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { io } from "socket.io-client";

const bin = process.env.AGENTD_BIN;
if (!bin) throw new Error("set AGENTD_BIN to the agentd binary");

async function startServer(extra = []) {
  const dir = mkdtempSync(join(tmpdir(), "agentd-sio-"));
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

async function api(url, method, path, body, key) {
  const headers = { "content-type": "application/json" };
  if (key) headers.authorization = `Bearer ${key}`;
  const res = await fetch(url + path, { method, headers, body: body ? JSON.stringify(body) : undefined });
  return { status: res.status, body: await res.json() };
}

function connect(url, opts = {}) {
  return new Promise((resolve, reject) => {
    const s = io(url, { reconnection: false, ...opts });
    s.on("connect", () => resolve(s));
    s.on("connect_error", (e) => { s.close(); reject(e); });
  });
}

// collect gathers the events up to the first one until accepts. Events
// after it (the session's idle status, arriving in the same packet batch)
// are not added: the array is the caller's once resolved.
function collect(socket, until) {
  return new Promise((resolve) => {
    const got = [];
    let done = false;
    socket.on("session:event", (ev) => {
      if (done) return;
      got.push(ev);
      if (until(ev)) {
        done = true;
        resolve(got);
      }
    });
  });
}

let srv;
before(async () => { srv = await startServer(); });
after(() => srv.stop());

for (const transports of [["polling"], ["websocket"], ["polling", "websocket"]]) {
  test(`join, ack and events over ${transports.join("+")}`, async () => {
    const { body: created } = await api(srv.url, "POST", "/api/sessions", { architecture: "shell" });
    const socket = await connect(srv.url, { transports });
    try {
      // Listen before joining: events may arrive in the same packet batch as the ack.
      const done = collect(socket, (ev) => ev.type === "query:completed");
      const ack = await socket.emitWithAck("session:join", created.sessionId);
      assert.equal(ack.ok, true);
      const sent = await api(srv.url, "POST", `/api/sessions/${created.sessionId}/messages`, { content: "echo one; echo two" });
      assert.equal(sent.status, 202);
      const events = await done;
      events.forEach((ev, i) => assert.equal(ev.seq, i + 1, "seqs from 1 with no gap"));
      assert.ok(events.every((ev) => ev.context.sessionId === created.sessionId));
      const deltas = events.filter((ev) => ev.type === "block:delta").map((ev) => ev.payload.delta).join("");
      assert.equal(deltas, "one\ntwo\n");

      // A second client resumes after a seq and gets exactly the rest.
      const other = await connect(srv.url, { transports });
      try {
        const from = 5;
        const rest = collect(other, (ev) => ev.seq === events.at(-1).seq);
        const ack2 = await other.emitWithAck("session:join", { sessionId: created.sessionId, after: from });
        assert.equal(ack2.ok, true);
        const got = await rest;
        assert.deepEqual(got.map((e) => e.seq), events.slice(from).map((e) => e.seq));
      } finally {
        other.close();
      }
      assert.equal((await socket.emitWithAck("session:leave", created.sessionId)).ok, true);
    } finally {
      socket.close();
    }
  });
}

test("join of an unknown session is refused in the ack", async () => {
  const socket = await connect(srv.url);
  try {
    const ack = await socket.emitWithAck("session:join", "no-such-session");
    assert.equal(ack.ok, false);
    assert.equal(ack.error.code, "SESSION_NOT_FOUND");
    const bad = await socket.emitWithAck("session:join", { sessionId: "x", after: -1 });
    assert.equal(bad.ok, false);
  } finally {
    socket.close();
  }
});

test("API key: refused without it, accepted with auth.token", async () => {
  const keyed = await startServer(["--api-key", "sio-secret"]);
  try {
    await assert.rejects(connect(keyed.url), /unauthorized/);
    const socket = await connect(keyed.url, { auth: { token: "sio-secret" } });
    const { body: created } = await api(keyed.url, "POST", "/api/sessions", { architecture: "shell" }, "sio-secret");
    const ack = await socket.emitWithAck("session:join", created.sessionId);
    assert.equal(ack.ok, true);
    socket.close();
  } finally {
    keyed.stop();
  }
});
