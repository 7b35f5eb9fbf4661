import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { AgentdClient, EventSocket, type AgentEvent, type ConnectionState, type WebSocketLike } from "../src/index.js";
import { ev } from "./helpers.js";

/** An in-memory WebSocket: the test plays the server. */
class FakeWS implements WebSocketLike {
  static all: FakeWS[] = [];
  readyState = 0;
  sent: Record<string, unknown>[] = [];
  closedWith: number | null = null;
  onopen: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: unknown }) => void) | null = null;
  onclose: ((ev: { code: number; reason: string }) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;
  constructor(readonly url: string) {
    FakeWS.all.push(this);
  }
  send(data: string): void {
    if (this.readyState !== 1) throw new Error("not open");
    this.sent.push(JSON.parse(data) as Record<string, unknown>);
  }
  close(code = 1000): void {
    this.closedWith = code;
    this.readyState = 3;
  }
  // server side
  open(): void {
    this.readyState = 1;
    this.onopen?.({});
  }
  push(frame: object): void {
    this.onmessage?.({ data: JSON.stringify(frame) });
  }
  drop(code = 1006): void {
    this.readyState = 3;
    this.onclose?.({ code, reason: "" });
  }
  joins(): Record<string, unknown>[] {
    return this.sent.filter((m) => m.op === "join");
  }
  ackAll(): void {
    for (const j of this.joins()) this.push({ op: "ack", id: j.id, ok: true });
  }
}

const last = () => FakeWS.all[FakeWS.all.length - 1]!;
const delta = (seq: number, d = String(seq)) => ev(seq, "block:delta", { blockId: "a", delta: d });

beforeEach(() => {
  FakeWS.all = [];
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

function socket(extra: Partial<ConstructorParameters<typeof EventSocket>[0]> = {}) {
  return new EventSocket({ url: () => "ws://x/api/ws", WebSocket: FakeWS, backoff: { jitter: 0 }, pingMs: 0, ...extra });
}

describe("EventSocket", () => {
  it("joins with after and delivers events in order", () => {
    const s = socket();
    const got: number[] = [];
    s.subscribe("s1", { after: 5, onEvent: (e) => got.push(e.seq) });
    last().open();
    expect(last().joins()).toEqual([{ op: "join", sessionId: "s1", after: 5, id: expect.any(String) }]);
    last().ackAll();
    for (const n of [6, 7, 8]) last().push({ op: "event", event: delta(n) });
    expect(got).toEqual([6, 7, 8]);
    expect(s.state).toBe("connected");
  });

  it("resumes after a drop from the last seq and never delivers an event twice", () => {
    const s = socket();
    const got: number[] = [];
    const sub = s.subscribe("s1", { onEvent: (e) => got.push(e.seq) });
    const states: ConnectionState[] = [];
    s.onStateChange((st) => states.push(st));
    last().open();
    last().ackAll();
    for (const n of [1, 2, 3]) last().push({ op: "event", event: delta(n) });
    last().drop();
    expect(s.state).toBe("reconnecting");
    vi.advanceTimersByTime(250);
    expect(FakeWS.all).toHaveLength(2);
    last().open();
    expect(last().joins()[0]!.after).toBe(3);
    last().ackAll();
    // A server that replays an overlap anyway: the overlap is dropped.
    for (const n of [2, 3, 4, 5]) last().push({ op: "event", event: delta(n) });
    expect(got).toEqual([1, 2, 3, 4, 5]);
    expect(sub.lastSeq).toBe(5);
    expect(states).toEqual(["connected", "reconnecting", "connected"]);
  });

  it("reconnects at once after close code 4008 (slow consumer)", () => {
    const s = socket();
    s.subscribe("s1", { onEvent: () => {} });
    last().open();
    last().drop(4008);
    vi.advanceTimersByTime(0);
    expect(FakeWS.all).toHaveLength(2);
  });

  it("stops and reports close code 4001 (credential no longer valid) instead of retrying", () => {
    let told = 0;
    const s = socket({ onUnauthorized: () => told++ });
    s.subscribe("s1", { onEvent: () => {} });
    last().open();
    last().drop(4001);
    expect(told).toBe(1);
    expect(s.state).toBe("closed");
    vi.advanceTimersByTime(60_000);
    expect(FakeWS.all).toHaveLength(1);
  });

  it("renews its credential over the open connection, keeping its subscriptions", async () => {
    const s = socket();
    const got: number[] = [];
    s.subscribe("s1", { after: 0, onEvent: (e) => got.push(e.seq) });
    expect(await s.renew("early")).toBe(false); // not connected yet
    last().open();
    last().ackAll();
    const ws = last();
    const renewals = () => ws.sent.filter((m) => m.op === "auth");
    const ok = s.renew("fresh");
    expect(renewals()).toEqual([{ op: "auth", token: "fresh", id: expect.any(String) }]);
    ws.push({ op: "ack", id: renewals()[0]!.id, ok: true, expiresAt: "2026-11-26T08:00:00Z" });
    expect(await ok).toBe(true);
    ws.push({ op: "event", event: delta(1) });
    expect(got).toEqual([1]);
    // Refused, or unknown to an older server: false, the connection as it was.
    const refused = s.renew("bob's");
    ws.push({ op: "ack", id: renewals()[1]!.id, ok: false, error: { code: "FORBIDDEN", error: "another user" } });
    expect(await refused).toBe(false);
    const unknown = s.renew("t");
    ws.push({ op: "error", id: renewals()[2]!.id, error: { code: "UNKNOWN_OP", error: "unknown op" } });
    expect(await unknown).toBe(false);
    // A connection lost before the ack: false.
    const lost = s.renew("t2");
    ws.drop();
    expect(await lost).toBe(false);
    expect(FakeWS.all.length).toBe(1); // renewing never reconnected by itself
    s.close();
  });

  it("backs off exponentially while the server is away, and resets after a good join", () => {
    const s = socket({ backoff: { initialMs: 100, factor: 2, maxMs: 1000, jitter: 0 } });
    s.subscribe("s1", { onEvent: () => {} });
    const times: number[] = [];
    let t = 0;
    for (let i = 0; i < 6; i++) {
      last().drop(1006); // connection refused
      const before = FakeWS.all.length;
      let waited = 0;
      while (FakeWS.all.length === before) {
        vi.advanceTimersByTime(10);
        waited += 10;
      }
      t += waited;
      times.push(waited);
    }
    expect(times).toEqual([100, 200, 400, 800, 1000, 1000]);
    last().open();
    last().ackAll();
    last().drop(1006);
    vi.advanceTimersByTime(100);
    expect(FakeWS.all).toHaveLength(8);
    expect(t).toBeGreaterThan(0);
  });

  it("reports a refused join and does not rejoin it", () => {
    const s = socket();
    const errors: string[] = [];
    s.subscribe("nope", { onEvent: () => {}, onError: (e) => errors.push(e.code) });
    last().open();
    const j = last().joins()[0]!;
    last().push({ op: "ack", id: j.id, ok: false, error: { code: "SESSION_NOT_FOUND", error: "no such session" } });
    expect(errors).toEqual(["SESSION_NOT_FOUND"]);
    last().drop();
    vi.advanceTimersByTime(250);
    last().open();
    expect(last().joins()).toHaveLength(0);
  });

  it("treats a gap as a broken stream and resumes from the last delivered seq", () => {
    const s = socket();
    const got: number[] = [];
    s.subscribe("s1", { onEvent: (e) => got.push(e.seq) });
    last().open();
    last().ackAll();
    last().push({ op: "event", event: delta(1) });
    last().push({ op: "event", event: delta(3) });
    expect(got).toEqual([1]);
    vi.advanceTimersByTime(0);
    expect(FakeWS.all).toHaveLength(2);
    last().open();
    expect(last().joins()[0]!.after).toBe(1);
  });

  it("ignores events of other sessions, malformed frames and binary data", () => {
    const s = socket();
    const got: AgentEvent[] = [];
    s.subscribe("s1", { onEvent: (e) => got.push(e) });
    last().open();
    last().push({ op: "event", event: ev(1, "session:idle", {}, "main", "other") });
    last().onmessage?.({ data: "{not json" });
    last().onmessage?.({ data: new ArrayBuffer(3) });
    last().push({ op: "event", event: null });
    last().push({ op: "error", error: { code: "BAD_REQUEST", error: "x" } });
    expect(got).toHaveLength(0);
    expect(s.state).toBe("connected");
  });

  it("close() stops for good and leave() is sent for a closed subscription", () => {
    const s = socket();
    const sub = s.subscribe("s1", { onEvent: () => {} });
    last().open();
    sub.close();
    expect(last().sent.at(-1)).toMatchObject({ op: "leave", sessionId: "s1" });
    s.close();
    expect(last().closedWith).toBe(1000);
    vi.advanceTimersByTime(60_000);
    expect(FakeWS.all).toHaveLength(1);
    expect(s.state).toBe("closed");
  });

  it("dropConnection() (the test hook) resumes like a network failure", () => {
    const s = socket();
    const got: number[] = [];
    s.subscribe("s1", { onEvent: (e) => got.push(e.seq) });
    last().open();
    last().ackAll();
    last().push({ op: "event", event: delta(1) });
    s.dropConnection();
    expect(FakeWS.all[0]!.closedWith).toBe(4000);
    vi.advanceTimersByTime(250);
    last().open();
    expect(last().joins()[0]!.after).toBe(1);
  });

  it("watches the session list and calls onJoined after every (re)join", () => {
    const s = socket();
    const seen: string[] = [];
    let joined = 0;
    s.watchSessions({ onSession: (x) => seen.push(x.sessionId + ":" + x.status), onJoined: () => joined++ });
    last().open();
    expect(last().joins()[0]).toEqual({ op: "join", sessionId: "*", id: expect.any(String) });
    last().ackAll();
    last().push({ op: "sessions", session: { sessionId: "a", status: "running" } });
    last().drop();
    vi.advanceTimersByTime(250);
    last().open();
    last().ackAll();
    expect(seen).toEqual(["a:running"]);
    expect(joined).toBe(2);
  });

  it("drops a connection that stays silent past ping + grace", () => {
    const s = socket({ pingMs: 1000, pongTimeoutMs: 500 });
    s.subscribe("s1", { onEvent: () => {} });
    last().open();
    vi.advanceTimersByTime(1000);
    expect(last().sent.some((m) => m.op === "ping")).toBe(true);
    vi.advanceTimersByTime(1000);
    expect(s.state).toBe("reconnecting");
  });

  it("puts the API key in the access_token query parameter", () => {
    const c = new AgentdClient({ baseUrl: "https://h:9/", apiKey: "k y", fetch: async () => new Response() });
    const s = EventSocket.forClient(c, { WebSocket: FakeWS, pingMs: 0 });
    expect(last().url).toBe("wss://h:9/api/ws?access_token=k+y");
    s.close();
  });
});
