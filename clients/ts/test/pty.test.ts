import { describe, expect, it } from "vitest";
import { AgentdClient, openPty, type PtyAuthResult, type WebSocketLike } from "../src/index.js";

/** An in-memory WebSocket for the terminal: the test plays the server. */
class FakePtyWS implements WebSocketLike {
  static last: FakePtyWS | null = null;
  readyState = 0;
  binaryType = "";
  sent: (string | Uint8Array)[] = [];
  onopen: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: unknown }) => void) | null = null;
  onclose: ((ev: { code: number; reason: string }) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;
  constructor(readonly url: string) {
    FakePtyWS.last = this;
  }
  send(data: string | Uint8Array): void {
    this.sent.push(data);
  }
  close(): void {
    this.readyState = 3;
  }
}

describe("openPty", () => {
  it("renews its credential over the connection and reports the answer", () => {
    const c = new AgentdClient({ baseUrl: "http://127.0.0.1:1", apiKey: "old" });
    const answers: PtyAuthResult[] = [];
    const pty = openPty(c, "s1", { rows: 24, cols: 80, WebSocket: FakePtyWS, onData: () => {}, onAuth: (r) => answers.push(r) });
    const ws = FakePtyWS.last!;
    expect(ws.url).toContain("access_token=old");
    pty.reauth("early"); // not open yet: nothing sent
    expect(ws.sent).toEqual([]);
    ws.readyState = 1;
    ws.onopen?.({});
    pty.reauth("new");
    expect(ws.sent).toEqual([JSON.stringify({ type: "auth", token: "new" })]);
    ws.onmessage?.({ data: JSON.stringify({ type: "auth", ok: true, expiresAt: "2026-11-26T08:00:00Z" }) });
    ws.onmessage?.({ data: JSON.stringify({ type: "auth", ok: false, code: "FORBIDDEN", error: "another user" }) });
    expect(answers).toEqual([
      { ok: true, expiresAt: "2026-11-26T08:00:00Z" },
      { ok: false, code: "FORBIDDEN", error: "another user" },
    ]);
  });

  it("still reports exits", () => {
    const c = new AgentdClient({ baseUrl: "http://127.0.0.1:1", apiKey: "k" });
    const exits: number[] = [];
    openPty(c, "s1", { rows: 24, cols: 80, WebSocket: FakePtyWS, onData: () => {}, onExit: (code) => exits.push(code) });
    FakePtyWS.last!.onmessage?.({ data: JSON.stringify({ type: "exit", code: 3 }) });
    expect(exits).toEqual([3]);
  });
});
