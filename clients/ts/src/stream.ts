// The WebSocket event stream (GET /api/ws) with auto-resume.
//
// One EventSocket carries any number of session subscriptions (and the live
// session list) over one connection. Each subscription remembers the seq of
// the last event it delivered; after any disconnect the socket reconnects
// with exponential backoff (at once for close code 4008, "slow consumer") and
// re-joins every subscription with `after` = that seq, so the server replays
// exactly what was missed. Events at or below the remembered seq are dropped,
// so a subscriber never sees an event twice; a gap (never expected) forces a
// reconnect, which fills it.

import type { AgentdClient } from "./rest.js";
import type { AgentEvent, SessionSummary } from "./types.js";

export type ConnectionState = "connecting" | "connected" | "reconnecting" | "closed";

/** The part of the WebSocket API this module uses (browser WebSocket or a compatible one). */
export interface WebSocketLike {
  readonly readyState: number;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}
export type WebSocketCtor = new (url: string) => WebSocketLike;

export interface Backoff {
  /** First retry delay. Default 250 ms. */
  initialMs: number;
  /** Cap. Default 10 s. */
  maxMs: number;
  /** Growth per failed attempt. Default 2. */
  factor: number;
  /** Random spread, 0..1, as a fraction of the delay. Default 0.2. */
  jitter: number;
}

export interface EventSocketOptions {
  /** Supplies the URL (with access_token) each time the socket connects. */
  url: () => string;
  WebSocket?: WebSocketCtor;
  backoff?: Partial<Backoff>;
  /** Send a ping this often; a connection silent for pingMs + pongTimeoutMs is presumed dead. */
  pingMs?: number;
  pongTimeoutMs?: number;
  /** Connect right away (default true). */
  autoConnect?: boolean;
  /**
   * The server closed the connection because its credential stopped being
   * valid (close code 4001: revoked or expired token, disabled user). The
   * socket does not reconnect with that credential: it is closed, and the
   * caller signs in again (and makes a new socket).
   */
  onUnauthorized?: () => void;
}

/** The close code of a connection whose credential stopped being valid. */
export const CLOSE_UNAUTHORIZED = 4001;

export interface ServerError {
  code: string;
  error: string;
}

export interface SubscribeOptions {
  /** Deliver events after this seq (the last seq the caller already has). */
  after?: number;
  onEvent: (e: AgentEvent) => void;
  /** The join was refused (e.g. SESSION_NOT_FOUND); the subscription is dead. */
  onError?: (err: ServerError) => void;
  /** Every successful (re)join, with the seq it resumed from. */
  onJoined?: (after: number) => void;
}

export interface Subscription {
  readonly sessionId: string;
  /** The seq of the last event delivered. */
  readonly lastSeq: number;
  close(): void;
}

export interface SessionListOptions {
  onSession: (s: SessionSummary) => void;
  /** Every successful (re)join: refetch the list, changes may have been missed while away. */
  onJoined?: () => void;
  onError?: (err: ServerError) => void;
}

const SESSIONS = "*";

interface Sub {
  sessionId: string;
  lastSeq: number;
  closed: boolean;
  failed: boolean;
  onEvent?: (e: AgentEvent) => void;
  onSession?: SessionListOptions["onSession"];
  onError?: ((err: ServerError) => void) | undefined;
  onJoined?: ((after: number) => void) | undefined;
}

type Pending = { sub: Sub; after: number };

const OPEN = 1;

/**
 * A self-healing connection to /api/ws. All callbacks run on the event loop
 * that delivers WebSocket messages; nothing here is shared across threads.
 */
export class EventSocket {
  private readonly opts: EventSocketOptions;
  private readonly Ctor: WebSocketCtor;
  private readonly backoff: Backoff;
  private ws: WebSocketLike | null = null;
  private st: ConnectionState = "connecting";
  private readonly subs = new Map<string, Sub>();
  private readonly acks = new Map<string, Pending>();
  /** renew calls waiting for their ack, by frame id. */
  private readonly renewals = new Map<string, (ok: boolean) => void>();
  private nextId = 1;
  private attempt = 0;
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  private pingTimer: ReturnType<typeof setInterval> | null = null;
  private lastHeard = 0;
  private readonly stateListeners = new Set<(s: ConnectionState) => void>();
  /** Connections opened so far (1 + reconnects); for tests and diagnostics. */
  connects = 0;

  constructor(opts: EventSocketOptions) {
    this.opts = opts;
    const C = opts.WebSocket ?? (globalThis as { WebSocket?: WebSocketCtor }).WebSocket;
    if (!C) throw new Error("agentd stream: no WebSocket implementation");
    this.Ctor = C;
    this.backoff = { initialMs: 250, maxMs: 10_000, factor: 2, jitter: 0.2, ...opts.backoff };
    if (opts.autoConnect !== false) this.connect();
  }

  /** An EventSocket for a client's server and key. */
  static forClient(client: AgentdClient, opts: Omit<EventSocketOptions, "url"> = {}): EventSocket {
    return new EventSocket({ ...opts, url: () => client.wsUrl("/api/ws") });
  }

  get state(): ConnectionState {
    return this.st;
  }

  onStateChange(l: (s: ConnectionState) => void): () => void {
    this.stateListeners.add(l);
    return () => this.stateListeners.delete(l);
  }

  /** Streams a session's events after opts.after, live, across reconnects. One subscription per session. */
  subscribe(sessionId: string, opts: SubscribeOptions): Subscription {
    if (sessionId === SESSIONS) throw new Error("use watchSessions for the session list");
    const old = this.subs.get(sessionId);
    if (old) this.unsubscribe(old);
    const sub: Sub = {
      sessionId,
      lastSeq: opts.after ?? 0,
      closed: false,
      failed: false,
      onEvent: opts.onEvent,
      onError: opts.onError,
      onJoined: opts.onJoined,
    };
    this.subs.set(sessionId, sub);
    this.join(sub);
    return this.handle(sub);
  }

  /** Live session-list changes (`"sessionId":"*"`). */
  watchSessions(opts: SessionListOptions): Subscription {
    const old = this.subs.get(SESSIONS);
    if (old) this.unsubscribe(old);
    const sub: Sub = {
      sessionId: SESSIONS,
      lastSeq: 0,
      closed: false,
      failed: false,
      onSession: opts.onSession,
      onError: opts.onError,
      onJoined: opts.onJoined ? () => opts.onJoined!() : undefined,
    };
    this.subs.set(SESSIONS, sub);
    this.join(sub);
    return this.handle(sub);
  }

  private handle(sub: Sub): Subscription {
    return {
      sessionId: sub.sessionId,
      get lastSeq() {
        return sub.lastSeq;
      },
      close: () => this.unsubscribe(sub),
    };
  }

  private unsubscribe(sub: Sub): void {
    if (sub.closed) return;
    sub.closed = true;
    if (this.subs.get(sub.sessionId) === sub) this.subs.delete(sub.sessionId);
    this.send({ op: "leave", sessionId: sub.sessionId, id: this.id() });
  }

  /**
   * Test hook: drops the connection as a network failure would (no leave, no
   * close handshake from the app's point of view); the socket then resumes.
   */
  dropConnection(): void {
    this.drop(false);
  }

  private drop(immediately: boolean): void {
    const ws = this.ws;
    if (!ws) return;
    this.detach(ws);
    try {
      ws.close(4000, "dropped by client");
    } catch {
      // already closing
    }
    this.scheduleReconnect(immediately);
  }

  /**
   * Hands a refreshed token to the open connection ({"op":"auth"}): the
   * server then keeps it open past the expiry of the token it was opened
   * with, and its subscriptions go on without a reconnect. Resolves true
   * when the server took it; false when not connected, when the server
   * refused it, or when it does not know the op (an older server). A caller
   * with a new token then reconnects (the connection closes 4001 at the old
   * token's expiry otherwise).
   */
  renew(token: string): Promise<boolean> {
    if (this.st !== "connected") return Promise.resolve(false);
    const id = this.id();
    return new Promise((resolve) => {
      this.renewals.set(id, resolve);
      if (!this.send({ op: "auth", token, id })) {
        this.renewals.delete(id);
        resolve(false);
      }
    });
  }

  /** Skips the backoff wait and reconnects now (e.g. when the browser comes back online). */
  reconnectNow(): void {
    if (this.st === "closed" || this.st === "connected") return;
    this.clearRetry();
    this.connect();
  }

  /** Closes for good: no reconnect. */
  close(): void {
    this.setState("closed");
    this.clearRetry();
    this.stopPing();
    const ws = this.ws;
    this.ws = null;
    if (ws) {
      this.detach(ws);
      try {
        ws.close(1000, "client closed");
      } catch {
        // ignore
      }
    }
  }

  /** Connects if not connected (with autoConnect false, the first call). */
  connect(): void {
    if (this.st === "closed") return;
    if (this.ws) return;
    this.clearRetry();
    if (this.st !== "reconnecting") this.setState("connecting");
    let ws: WebSocketLike;
    try {
      ws = new this.Ctor(this.opts.url());
    } catch {
      this.scheduleReconnect(false);
      return;
    }
    this.ws = ws;
    this.connects++;
    ws.onopen = () => {
      if (this.ws !== ws) return;
      this.lastHeard = Date.now();
      this.acks.clear();
      this.setState("connected");
      this.startPing();
      for (const sub of this.subs.values()) if (!sub.failed) this.join(sub);
    };
    ws.onmessage = (ev) => {
      if (this.ws !== ws) return;
      this.lastHeard = Date.now();
      this.onFrame(ev.data);
    };
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      this.detach(ws);
      if (ev.code === CLOSE_UNAUTHORIZED) {
        this.close();
        this.opts.onUnauthorized?.();
        return;
      }
      this.scheduleReconnect(ev.code === 4008);
    };
    ws.onerror = () => {
      // onclose follows and decides
    };
  }

  private detach(ws: WebSocketLike): void {
    ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
    if (this.ws === ws) this.ws = null;
    this.stopPing();
    this.acks.clear();
    const waiting = [...this.renewals.values()];
    this.renewals.clear();
    for (const r of waiting) r(false);
  }

  private scheduleReconnect(immediately: boolean): void {
    if (this.st === "closed") return;
    this.setState("reconnecting");
    this.clearRetry();
    let delay = 0;
    if (!immediately) {
      const b = this.backoff;
      const base = Math.min(b.maxMs, b.initialMs * Math.pow(b.factor, this.attempt));
      delay = base * (1 + b.jitter * (Math.random() * 2 - 1));
      this.attempt++;
    }
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.connect();
    }, delay);
  }

  private clearRetry(): void {
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    this.retryTimer = null;
  }

  private startPing(): void {
    this.stopPing();
    const every = this.opts.pingMs ?? 15_000;
    const grace = this.opts.pongTimeoutMs ?? 10_000;
    if (every <= 0) return;
    this.pingTimer = setInterval(() => {
      const ws = this.ws;
      if (!ws) return;
      if (Date.now() - this.lastHeard > every + grace) {
        // Silent too long: a half-open connection. Start over.
        this.dropConnection();
        return;
      }
      this.send({ op: "ping", id: this.id() });
    }, every);
  }

  private stopPing(): void {
    if (this.pingTimer !== null) clearInterval(this.pingTimer);
    this.pingTimer = null;
  }

  private setState(s: ConnectionState): void {
    if (this.st === s) return;
    this.st = s;
    for (const l of this.stateListeners) l(s);
  }

  private id(): string {
    return "c" + this.nextId++;
  }

  private send(msg: object): boolean {
    const ws = this.ws;
    if (!ws || ws.readyState !== OPEN) return false;
    try {
      ws.send(JSON.stringify(msg));
      return true;
    } catch {
      return false;
    }
  }

  private join(sub: Sub): void {
    if (!this.ws || this.ws.readyState !== OPEN) return; // joined on open
    const id = this.id();
    const msg: Record<string, unknown> = { op: "join", sessionId: sub.sessionId, id };
    if (sub.sessionId !== SESSIONS) msg.after = sub.lastSeq;
    this.acks.set(id, { sub, after: sub.lastSeq });
    this.send(msg);
  }

  private onFrame(data: unknown): void {
    if (typeof data !== "string") return;
    let f: { op?: string; [k: string]: unknown };
    try {
      f = JSON.parse(data) as typeof f;
    } catch {
      return;
    }
    switch (f.op) {
      case "event":
        this.onEvent(f.event as AgentEvent);
        return;
      case "ack": {
        const renewed = this.renewals.get(String(f.id));
        if (renewed) {
          this.renewals.delete(String(f.id));
          renewed(f.ok === true);
          return;
        }
        const p = this.acks.get(String(f.id));
        if (!p) return;
        this.acks.delete(String(f.id));
        if (p.sub.closed) return;
        if (f.ok === true) {
          this.attempt = 0; // the server is really there: reset the backoff
          p.sub.onJoined?.(p.after);
        } else {
          p.sub.failed = true;
          const err = (f.error ?? {}) as Partial<ServerError>;
          p.sub.onError?.({ code: err.code ?? "JOIN_FAILED", error: err.error ?? "join refused" });
        }
        return;
      }
      case "sessions": {
        const sub = this.subs.get(SESSIONS);
        if (sub && !sub.closed && f.session && typeof f.session === "object") {
          sub.onSession?.(f.session as SessionSummary);
        }
        return;
      }
      case "error": {
        // An older server that does not know "auth" answers it so.
        const renewed = this.renewals.get(String(f.id));
        if (renewed) {
          this.renewals.delete(String(f.id));
          renewed(false);
        }
        return;
      }
      default:
        return; // pong: nothing to do
    }
  }

  private onEvent(e: AgentEvent): void {
    if (!e || typeof e.seq !== "number" || !e.context) return;
    const sub = this.subs.get(e.context.sessionId);
    if (!sub || sub.closed || !sub.onEvent) return;
    if (e.seq <= sub.lastSeq) return; // already delivered
    if (e.seq !== sub.lastSeq + 1) {
      // A gap should never happen (the server replays after+1…); resuming
      // from lastSeq on a fresh connection fills it.
      this.drop(true);
      return;
    }
    sub.lastSeq = e.seq;
    sub.onEvent(e);
  }
}
