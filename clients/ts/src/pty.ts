// The terminal WebSocket (GET /api/sessions/{id}/pty): binary frames are raw
// terminal bytes both ways; text frames carry {"type":"resize"} and
// {"type":"auth","token"} from the client, and {"type":"exit","code":N} and
// {"type":"auth","ok"} from the server.

import type { AgentdClient } from "./rest.js";
import type { WebSocketCtor, WebSocketLike } from "./stream.js";

export interface PtyOptions {
  rows: number;
  cols: number;
  WebSocket?: WebSocketCtor;
  onData: (bytes: Uint8Array) => void;
  onExit?: (code: number) => void;
  /** The connection ended (after onExit, or on its own). */
  onClose?: (code: number, reason: string) => void;
  onOpen?: () => void;
  /** The server's answer to reauth: ok, or the error code (UNAUTHORIZED, FORBIDDEN…). */
  onAuth?: (result: PtyAuthResult) => void;
}

export interface PtyAuthResult {
  ok: boolean;
  expiresAt?: string;
  code?: string;
  error?: string;
}

export interface PtyConnection {
  write(data: string | Uint8Array): void;
  resize(rows: number, cols: number): void;
  /**
   * Replaces the connection's credential with a refreshed token: the server
   * otherwise closes the terminal (4001) when the token it was opened with
   * expires. Answered through onAuth. Does nothing unless open.
   */
  reauth(token: string): void;
  close(): void;
}

export function openPty(client: AgentdClient, sessionId: string, opts: PtyOptions): PtyConnection {
  const C = opts.WebSocket ?? (globalThis as { WebSocket?: WebSocketCtor }).WebSocket;
  if (!C) throw new Error("agentd pty: no WebSocket implementation");
  const url = client.wsUrl(`/api/sessions/${encodeURIComponent(sessionId)}/pty`, { rows: opts.rows, cols: opts.cols });
  const ws = new C(url) as WebSocketLike & { binaryType?: string; send(data: string | ArrayBufferLike | Uint8Array): void };
  ws.binaryType = "arraybuffer";
  const enc = new TextEncoder();
  ws.onopen = () => opts.onOpen?.();
  ws.onmessage = (ev) => {
    const d = ev.data;
    if (typeof d === "string") {
      try {
        const m = JSON.parse(d) as { type?: string; code?: number | string; ok?: boolean; expiresAt?: string; error?: string };
        if (m.type === "exit") opts.onExit?.(typeof m.code === "number" ? m.code : -1);
        else if (m.type === "auth")
          opts.onAuth?.({
            ok: m.ok === true,
            ...(typeof m.expiresAt === "string" ? { expiresAt: m.expiresAt } : {}),
            ...(typeof m.code === "string" ? { code: m.code } : {}),
            ...(typeof m.error === "string" ? { error: m.error } : {}),
          });
      } catch {
        // not a control frame: ignore
      }
      return;
    }
    if (d instanceof ArrayBuffer) opts.onData(new Uint8Array(d));
    else if (ArrayBuffer.isView(d)) opts.onData(new Uint8Array(d.buffer, d.byteOffset, d.byteLength));
  };
  ws.onclose = (ev) => opts.onClose?.(ev.code, ev.reason);
  ws.onerror = () => {};
  return {
    write(data) {
      if (ws.readyState !== 1) return;
      ws.send(typeof data === "string" ? enc.encode(data) : data);
    },
    resize(rows, cols) {
      if (ws.readyState !== 1) return;
      ws.send(JSON.stringify({ type: "resize", rows, cols }));
    },
    reauth(token) {
      if (ws.readyState !== 1) return;
      ws.send(JSON.stringify({ type: "auth", token }));
    },
    close() {
      ws.close(1000, "client closed");
    },
  };
}
