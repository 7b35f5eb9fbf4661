import { applyBatch, applyEvent, initialState, prependPage, type ApplyResult, type ConversationState, type OlderPage } from "./reducer.js";
import type { AgentEvent } from "./types.js";

/** Runs a callback later: requestAnimationFrame in a browser, a microtask elsewhere. */
export type Scheduler = (cb: () => void) => void;

export interface ConversationOptions {
  /** Starting state (e.g. stateFromSnapshot of GET /api/sessions/{id}). */
  initial?: ConversationState;
  /**
   * When set, push() queues events and applies the queue in one batch when
   * the scheduler fires, so listeners run at most once per frame however many
   * deltas arrive. Without it push() applies at once.
   */
  schedule?: Scheduler;
  /** Called for an event that could not be applied (unknown block, malformed payload). */
  onError?: (message: string) => void;
}

export type Listener = (state: ConversationState) => void;

/**
 * A conversation's live state. Events go in through push (or apply); the
 * state is replaced, never mutated, so listeners may keep old states.
 * Not thread-safe in any sense that matters for JS: call from one event loop.
 */
export class Conversation {
  private st: ConversationState;
  private queue: AgentEvent[] = [];
  private scheduled = false;
  private readonly listeners = new Set<Listener>();
  private readonly schedule: Scheduler | undefined;
  private readonly onError: ((message: string) => void) | undefined;
  /** Events dropped as duplicates (seq at or below lastSeq) since creation. */
  duplicates = 0;

  constructor(opts: ConversationOptions = {}) {
    this.st = opts.initial ?? initialState();
    this.schedule = opts.schedule;
    this.onError = opts.onError;
  }

  get state(): ConversationState {
    return this.st;
  }

  /**
   * The seq of the last event applied or queued: the resume point. Queued
   * events count, since they will be applied before anything received later.
   */
  get lastSeq(): number {
    const q = this.queue;
    for (let i = q.length - 1; i >= 0; i--) {
      const s = q[i]!.seq;
      if (s > this.st.lastSeq) return s;
    }
    return this.st.lastSeq;
  }

  /** Replaces the whole state (e.g. after loading a snapshot) and notifies. */
  reset(state: ConversationState): void {
    this.queue = [];
    this.st = state;
    this.emit();
  }

  /**
   * Puts an older page of the conversation (getSession(id, {before:
   * state.blocks[0].id})) before the blocks held, applying queued events
   * first; notifies when it added anything. Returns how many blocks it
   * inserted. See prependPage in the reducer for what moves.
   */
  prependPage(page: OlderPage): number {
    this.flush();
    const r = prependPage(this.st, page);
    if (r.state !== this.st) {
      this.st = r.state;
      this.emit();
    }
    return r.inserted;
  }

  /** Applies one event now and notifies listeners if it changed anything. */
  apply(e: AgentEvent): ApplyResult {
    this.flush();
    const r = applyEvent(this.st, e);
    if (r.outcome === "duplicate") this.duplicates++;
    if (r.outcome === "error" && r.error) this.onError?.(r.error);
    if (r.state !== this.st) {
      this.st = r.state;
      this.emit();
    }
    return r;
  }

  /** Queues an event (batched per scheduler tick), or applies it at once without a scheduler. */
  push(e: AgentEvent): void {
    if (!this.schedule) {
      this.apply(e);
      return;
    }
    this.queue.push(e);
    if (!this.scheduled) {
      this.scheduled = true;
      this.schedule(() => {
        this.scheduled = false;
        this.flush();
      });
    }
  }

  /** Applies every queued event in one batch and notifies once. */
  flush(): void {
    if (this.queue.length === 0) return;
    const q = this.queue;
    this.queue = [];
    const r = applyBatch(this.st, q);
    this.duplicates += r.duplicates;
    for (const err of r.errors) this.onError?.(err);
    if (r.state !== this.st) {
      this.st = r.state;
      this.emit();
    }
  }

  subscribe(l: Listener): () => void {
    this.listeners.add(l);
    return () => this.listeners.delete(l);
  }

  private emit(): void {
    for (const l of this.listeners) l(this.st);
  }
}
