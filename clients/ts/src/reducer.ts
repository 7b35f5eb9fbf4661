// The conversation reducer: the same rules as the Go reducer in
// conversation/reducer.go, so a TypeScript client and GET /api/sessions/{id}
// always agree on the blocks of a log.
//
//   - block:upsert creates a block, or shallow-merges the fields present into
//     the block with the same id (metadata keys merge one level, as Go's
//     json.Unmarshal onto an existing map does; a null field changes nothing,
//     except input, which becomes null, and metadata, which is removed);
//     truncated and attachments are values replaced whole, as other fields.
//   - block:delta appends to `output` for tool_result and subagent blocks and
//     to `content` otherwise; a delta for an unknown block is an error.
//   - an event whose seq is at or below the last applied seq is a duplicate
//     and changes nothing; seq 0 (unsequenced) always applies; a sequenced
//     event that fails to apply still consumes its seq, as in Go.
//   - context.conversationId routes blocks to a subagent thread ("main" or
//     empty: the main conversation).
//   - metadata:update usage and costUSD are increments; model replaces.
//   - permission:requested adds (in request order), permission:resolved
//     removes; file:created|modified upsert, file:deleted removes; the file
//     list is sorted by path.
//   - query:started appends a running turn (startedAt: its timestamp);
//     query:completed|failed replaces the outcome of the latest turn with its
//     queryId (none: nothing is recorded), keeping startedAt and usage, and
//     notes the main conversation's block count (afterBlock).
//   - metadata:update usage also adds to the usage of the active turn.
//   - message:queued appends to queuedMessages (or replaces the entry with
//     its id); message:dequeued and message:cancelled remove it.
//   - permission:resolved with scope "session", behavior allow and a
//     toolName adds a permission rule for the tool (once).
//   - after every upsert the block gets what Go's reducer fills in: the
//     event's timestamp when it has none, and the fields its type requires
//     (REQUIRED_FIELDS) when absent: "" , false, {} (a tool_use's input),
//     "" (a subagent's), "pending" (a status, also when "").
//   - options:update sets sessionOptions (the last one wins).
//
// The state is immutable: applyEvent returns a new state sharing everything
// that did not change, so UI frameworks can compare blocks by identity.

import {
  MAIN_CONVERSATION,
  REQUIRED_FIELDS,
  type AgentEvent,
  type ArtifactRef,
  type BlockType,
  type AnyBlock,
  type Json,
  type PermissionRequestedPayload,
  type PermissionRule,
  type QueuedMessage,
  type ReducedState,
  type Runtime,
  type Subagent,
  type Turn,
  type Usage,
  type WorkspaceFile,
} from "./types.js";

/** Something the UI shows between blocks: a failed or interrupted turn, an error event. */
export interface Notice {
  /** Unique and stable within a conversation: a list key. */
  key: string;
  kind: "turn_failed" | "turn_interrupted" | "error";
  message: string;
  code?: string;
  queryId?: string;
  /** The number of main-conversation blocks when it happened: it belongs after them. */
  afterBlock: number;
  /** The error event's seq (error notices only). */
  seq?: number;
  timestamp?: string;
}

/**
 * The Go reducer's State plus what a UI needs that Go keeps out of State:
 * notices of error events. (Turn outcomes are in `turns`, which the server's
 * snapshot carries too; noticesOf makes notices of both.)
 */
export interface ConversationState extends ReducedState {
  errorNotices: readonly Notice[];
  /**
   * When the state holds a page of the conversation (a snapshot's last
   * blocks): how many main-conversation blocks come before blocks[0]. Absent
   * when it holds them all. Turns' and notices' afterBlock count from
   * blocks[0], not from the conversation's start.
   */
  blockOffset?: number;
}

/** The notice of a failed or interrupted turn; undefined for one that completed or still runs. */
export function turnNotice(t: Turn, index: number): Notice | undefined {
  const failed = t.status === "failed";
  if (!failed && !t.interrupted) return undefined;
  const n: Notice = {
    key: `turn-${index}`,
    kind: failed && !t.interrupted ? "turn_failed" : "turn_interrupted",
    message: failed ? t.error || "turn failed" : "turn interrupted",
    queryId: t.queryId,
    afterBlock: t.afterBlock ?? 0,
  };
  if (t.code) n.code = t.code;
  return n;
}

/**
 * Every notice of a state, in conversation order: failed and interrupted
 * turns (from `turns`, so they are there after a reload from a snapshot) and
 * error events. At the same position an error event's notice comes first, as
 * a failing turn logs its error before it ends.
 */
export function noticesOf(state: Pick<ConversationState, "turns" | "errorNotices">): Notice[] {
  const turns: Notice[] = [];
  state.turns.forEach((t, i) => {
    const n = turnNotice(t, i);
    if (n) turns.push(n);
  });
  // Both lists are already ordered by afterBlock: merge them.
  const errs = state.errorNotices;
  if (errs.length === 0) return turns;
  const out: Notice[] = [];
  let i = 0;
  let j = 0;
  while (i < turns.length || j < errs.length) {
    if (j < errs.length && (i >= turns.length || errs[j]!.afterBlock <= turns[i]!.afterBlock)) out.push(errs[j++]!);
    else out.push(turns[i++]!);
  }
  return out;
}

export type ApplyOutcome = "applied" | "duplicate" | "error";

export interface ApplyResult {
  state: ConversationState;
  outcome: ApplyOutcome;
  /** Set when outcome is "error": why the event could not be applied. */
  error?: string;
}

export function emptyUsage(): Usage {
  return { inputTokens: 0, outputTokens: 0 };
}

/** The state of an empty log. */
export function initialState(): ConversationState {
  return {
    status: "",
    runtime: { status: "", architecture: "" },
    blocks: [],
    subagents: [],
    usage: emptyUsage(),
    costUSD: 0,
    pendingPermissions: [],
    workspaceFiles: [],
    turns: [],
    queuedMessages: [],
    permissionRules: [],
    lastSeq: 0,
    errorNotices: [],
  };
}

/**
 * A ConversationState from a server snapshot (GET /api/sessions/{id}), so a
 * client can paint at once and then resume the live stream after its lastSeq.
 * The snapshot's blocks may be a page (the conversation's last blocks, from
 * index blockOffset): the turns' afterBlock are made relative to it, so they
 * place outcomes among the blocks held (a turn that ended before the page
 * gets 0), as the turns that end later do.
 */
export function stateFromSnapshot(s: Partial<ReducedState> & { lastSeq?: number; blockOffset?: number }): ConversationState {
  const st = initialState();
  const offset = s.blockOffset ?? 0;
  const turns = offset > 0 ? (s.turns ?? []).map((t) => (t.afterBlock ? { ...t, afterBlock: Math.max(0, t.afterBlock - offset) } : t)) : (s.turns ?? []);
  return {
    ...st,
    status: s.status ?? "",
    runtime: s.runtime ?? st.runtime,
    blocks: s.blocks ?? [],
    subagents: (s.subagents ?? []).map((a) => ({ ...a, blocks: a.blocks ?? [] })),
    usage: { ...emptyUsage(), ...(s.usage ?? {}) },
    costUSD: s.costUSD ?? 0,
    ...(s.model ? { model: s.model } : {}),
    pendingPermissions: s.pendingPermissions ?? [],
    workspaceFiles: s.workspaceFiles ?? [],
    ...(s.activeQueryId ? { activeQueryId: s.activeQueryId } : {}),
    turns,
    queuedMessages: s.queuedMessages ?? [],
    permissionRules: s.permissionRules ?? [],
    ...(s.sessionOptions ? { sessionOptions: s.sessionOptions } : {}),
    lastSeq: s.lastSeq ?? 0,
    ...(offset > 0 ? { blockOffset: offset } : {}),
  };
}

/** What prependPage needs of an older page: GET /api/sessions/{id}?before=… */
export type OlderPage = Pick<ReducedState, "blocks"> & { blockOffset?: number; turns?: ReducedState["turns"] };

/**
 * Puts an older page of the main conversation (GET /api/sessions/{id}
 * ?before=<state.blocks[0].id>) before the blocks a state holds; pure.
 * Blocks already held (by id) are skipped. Everything else of the state is
 * kept (it is newer than the page: live events went into it), but the
 * positions that count blocks: turns' and error notices' afterBlock move by
 * the blocks inserted, and a turn that ended before the held blocks (placed
 * at 0) takes its place from the page's turns (absolute afterBlock, as the
 * server sends them). blockOffset becomes the page's. Returns the state
 * unchanged when the page adds nothing.
 */
export function prependPage(state: ConversationState, page: OlderPage): { state: ConversationState; inserted: number } {
  const held = new Set(state.blocks.map((b) => b.id));
  const older = (page.blocks ?? []).filter((b) => !held.has(b.id));
  const offset = Math.max(0, page.blockOffset ?? 0);
  const k = older.length;
  if (k === 0) {
    if ((state.blockOffset ?? 0) === offset) return { state, inserted: 0 };
    const { blockOffset: _o, ...rest } = state;
    return { state: offset > 0 ? { ...rest, blockOffset: offset } : rest, inserted: 0 };
  }
  const pageTurns = page.turns ?? [];
  const turns = state.turns.map((t, i) => {
    if (t.afterBlock) return { ...t, afterBlock: t.afterBlock + k };
    if (t.status === "running") return t;
    // Ended before the held blocks (or with none): the page knows where.
    const p = pageTurns[i];
    if (t.afterBlock === undefined || !p || p.queryId !== t.queryId || !p.afterBlock) return t;
    return { ...t, afterBlock: Math.max(0, p.afterBlock - offset) };
  });
  const errorNotices = state.errorNotices.map((n) => ({ ...n, afterBlock: n.afterBlock + k }));
  const { blockOffset: _o, ...rest } = state;
  const next: ConversationState = { ...rest, blocks: [...older, ...state.blocks], turns, errorNotices };
  if (offset > 0) next.blockOffset = offset;
  return { state: next, inserted: k };
}

/** Folds one event into state; pure. Errors and duplicates leave state as it was (but for lastSeq). */
export function reduce(state: ConversationState, event: AgentEvent): ConversationState {
  return applyEvent(state, event).state;
}

/** Like reduce, and says whether the event applied, was a duplicate, or failed. */
export function applyEvent(state: ConversationState, event: AgentEvent): ApplyResult {
  const d = new Draft(state);
  const r = d.apply(event);
  if (r.outcome === "duplicate") return { state, outcome: r.outcome };
  return { state: d.finish(), outcome: r.outcome, ...(r.error !== undefined ? { error: r.error } : {}) };
}

/** Folds events, in order, into a state (from empty unless given). */
export function reduceAll(events: Iterable<AgentEvent>, from: ConversationState = initialState()): ConversationState {
  const d = new Draft(from);
  for (const e of events) d.apply(e);
  return d.finish();
}

/**
 * Folds a batch of events with one copy of the changed arrays: what a UI does
 * once per animation frame. Returns the new state and per-event outcomes.
 */
export function applyBatch(
  state: ConversationState,
  events: readonly AgentEvent[],
): { state: ConversationState; applied: number; duplicates: number; errors: string[] } {
  const d = new Draft(state);
  let applied = 0;
  let duplicates = 0;
  const errors: string[] = [];
  for (const e of events) {
    const r = d.apply(e);
    if (r.outcome === "applied") applied++;
    else if (r.outcome === "duplicate") duplicates++;
    else if (r.error) errors.push(r.error);
  }
  if (applied === 0 && errors.length === 0) return { state, applied, duplicates, errors };
  return { state: d.finish(), applied, duplicates, errors };
}

// ---- implementation -----------------------------------------------------------

// Index by block id for a blocks array. A draft that builds on an array
// claims its index (removing it from the cache), extends it, and caches it
// for the array it produces, so a linear chain of states never rebuilds an
// index while a second branch from an old state simply rebuilds its own.
const indexCache = new WeakMap<readonly AnyBlock[], Map<string, number>>();

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

class ThreadDraft {
  private readonly orig: readonly AnyBlock[];
  private blocks: AnyBlock[] | null = null; // copy, made on first write
  private index: Map<string, number> | null = null;
  private owned = new Set<AnyBlock>(); // blocks created in this draft: safe to mutate

  constructor(orig: readonly AnyBlock[]) {
    this.orig = orig;
  }

  get changed(): boolean {
    return this.blocks !== null;
  }

  get length(): number {
    return (this.blocks ?? this.orig).length;
  }

  private idx(): Map<string, number> {
    if (this.index) return this.index;
    const cached = indexCache.get(this.orig);
    if (cached) {
      indexCache.delete(this.orig);
      this.index = cached;
    } else {
      const m = new Map<string, number>();
      this.orig.forEach((b, i) => m.set(b.id, i));
      this.index = m;
    }
    return this.index;
  }

  private find(id: string): number {
    const list = this.blocks ?? this.orig;
    const i = this.idx().get(id);
    if (i !== undefined && i < list.length && list[i]!.id === id) return i;
    return -1;
  }

  private writable(): AnyBlock[] {
    if (!this.blocks) this.blocks = this.orig.slice();
    return this.blocks;
  }

  private own(i: number): AnyBlock {
    const list = this.writable();
    let b = list[i]!;
    if (!this.owned.has(b)) {
      b = { ...b };
      list[i] = b;
      this.owned.add(b);
    }
    return b;
  }

  upsert(raw: Record<string, unknown>, ts: string | undefined): string | undefined {
    const id = raw.id;
    if (typeof id !== "string" || id === "") return "block without id";
    const i = this.find(id);
    if (i >= 0) {
      const b = this.own(i);
      mergeInto(b, raw);
      fillRequired(b, ts);
      return undefined;
    }
    const b = {} as AnyBlock;
    mergeInto(b, raw);
    fillRequired(b, ts);
    const list = this.writable();
    this.idx().set(id, list.length);
    list.push(b);
    this.owned.add(b);
    return undefined;
  }

  delta(id: string, text: string): boolean {
    const i = this.find(id);
    if (i < 0) return false;
    const b = this.own(i);
    if (b.type === "tool_result" || b.type === "subagent") b.output = (b.output ?? "") + text;
    else b.content = (b.content ?? "") + text;
    return true;
  }

  finish(): readonly AnyBlock[] {
    if (!this.blocks) {
      if (this.index) indexCache.set(this.orig, this.index); // give back what we claimed
      return this.orig;
    }
    if (this.index) indexCache.set(this.blocks, this.index);
    return this.blocks;
  }
}

// mergeInto applies Go's json.Unmarshal-onto-existing-struct semantics.
function mergeInto(b: AnyBlock, raw: Record<string, unknown>): void {
  const t = b as unknown as Record<string, unknown>;
  for (const [k, v] of Object.entries(raw)) {
    if (v === undefined) continue;
    if (k === "metadata") {
      if (v === null) delete t.metadata;
      else if (isObject(v)) t.metadata = { ...(isObject(t.metadata) ? t.metadata : {}), ...(v as Record<string, Json>) };
      continue;
    }
    if (v === null) {
      if (k === "input") t.input = null;
      continue; // null into a Go string/bool/number/time is a no-op
    }
    t[k] = v;
  }
}

// fillRequired gives b what Go's reducer fills in after an upsert (see the
// rules above); Go writes empty strings and false from its zero values.
function fillRequired(b: AnyBlock, ts: string | undefined): void {
  if ((b.timestamp === undefined || isZeroTime(b.timestamp)) && ts && !isZeroTime(ts)) b.timestamp = ts;
  const t = b as unknown as Record<string, unknown>;
  for (const f of REQUIRED_FIELDS[b.type as BlockType] ?? []) {
    if (f === "status") {
      if (!b.status) b.status = "pending";
    } else if (t[f] === undefined) {
      t[f] = f === "isError" ? false : f === "input" ? (b.type === "subagent" ? "" : {}) : "";
    }
  }
}

interface SubDraft {
  meta: Subagent; // a copy owned by the draft
  thread: ThreadDraft;
}

class Draft {
  private st: ConversationState;
  private readonly main: ThreadDraft;
  private subs: Map<string, SubDraft> | null = null;
  private subList: Subagent[] | null = null; // copy of st.subagents, on first write
  private pending: PermissionRequestedPayload[] | null = null;
  private files: Map<string, WorkspaceFile> | null = null;
  private notices: Notice[] | null = null;
  private turns: Turn[] | null = null;
  private queue: QueuedMessage[] | null = null;
  private rules: PermissionRule[] | null = null;

  constructor(state: ConversationState) {
    this.st = { ...state };
    this.main = new ThreadDraft(state.blocks);
  }

  apply(e: AgentEvent): { outcome: ApplyOutcome; error?: string } {
    if (!isObject(e) || typeof e.type !== "string") return { outcome: "error", error: "malformed event" };
    const seq = typeof e.seq === "number" ? e.seq : 0;
    if (seq !== 0) {
      if (seq <= this.st.lastSeq) return { outcome: "duplicate" };
      this.st.lastSeq = seq;
    }
    const err = this.applyPayload(e, seq);
    if (err !== undefined) return { outcome: "error", error: `seq ${seq}: ${e.type}: ${err}` };
    return { outcome: "applied" };
  }

  private thread(conv: string | undefined): ThreadDraft {
    if (!conv || conv === MAIN_CONVERSATION) return this.main;
    return this.subagent(conv).thread;
  }

  private subagent(id: string): SubDraft {
    if (!this.subs) this.subs = new Map();
    let s = this.subs.get(id);
    if (s) return s;
    if (!this.subList) this.subList = this.st.subagents.slice();
    const at = this.subList.findIndex((x) => x.id === id);
    if (at >= 0) {
      const old = this.subList[at]!;
      s = { meta: { ...old }, thread: new ThreadDraft(old.blocks) };
      this.subList[at] = s.meta;
    } else {
      s = { meta: { id, toolUseId: id, status: "pending", blocks: [] }, thread: new ThreadDraft([]) };
      this.subList.push(s.meta);
    }
    this.subs.set(id, s);
    return s;
  }

  private addNotice(n: Notice): void {
    if (!this.notices) this.notices = this.st.errorNotices.slice();
    this.notices.push(n);
  }

  private writableTurns(): Turn[] {
    if (!this.turns) this.turns = this.st.turns.slice();
    return this.turns;
  }

  private applyPayload(e: AgentEvent, seq: number): string | undefined {
    const p = e.payload as unknown;
    const conv = isObject(e.context) ? (e.context.conversationId as string | undefined) : undefined;
    const ts = isObject(e.context) && typeof e.context.timestamp === "string" ? e.context.timestamp : undefined;
    if (e.type === "session:idle") return undefined;
    if (!isObject(p)) return "payload is not an object";
    switch (e.type) {
      case "block:upsert": {
        if (!isObject(p.block)) return "block is not an object";
        return this.thread(conv).upsert(p.block, ts);
      }
      case "block:delta": {
        if (typeof p.blockId !== "string" || typeof p.delta !== "string") return "malformed delta";
        if (!this.thread(conv).delta(p.blockId, p.delta)) return `delta for unknown block "${p.blockId}"`;
        return undefined;
      }
      case "metadata:update": {
        const u = p.usage as Partial<Usage> | undefined;
        if (isObject(u)) {
          const cur = this.st.usage;
          const next: Usage = {
            inputTokens: cur.inputTokens + (u.inputTokens ?? 0),
            outputTokens: cur.outputTokens + (u.outputTokens ?? 0),
          };
          const cr = (cur.cacheReadInputTokens ?? 0) + (u.cacheReadInputTokens ?? 0);
          const cc = (cur.cacheCreationInputTokens ?? 0) + (u.cacheCreationInputTokens ?? 0);
          if (cr) next.cacheReadInputTokens = cr;
          if (cc) next.cacheCreationInputTokens = cc;
          this.st.usage = next;
          const q = this.st.activeQueryId;
          if (q) {
            const turns = this.writableTurns();
            let at = turns.length - 1;
            while (at >= 0 && turns[at]!.queryId !== q) at--;
            if (at >= 0) turns[at] = { ...turns[at]!, usage: addUsage(turns[at]!.usage ?? emptyUsage(), u) };
          }
        }
        if (typeof p.costUSD === "number") this.st.costUSD += p.costUSD;
        if (typeof p.model === "string" && p.model !== "") this.st.model = p.model;
        return undefined;
      }
      case "status": {
        if (typeof p.status !== "string") return "status without status";
        this.st.status = p.status as ConversationState["status"];
        this.st.runtime = (isObject(p.runtime) ? p.runtime : { status: "", architecture: "" }) as unknown as Runtime;
        return undefined;
      }
      case "query:started": {
        if (!optional(p, "queryId", "string") || !optional(p, "content", "string")) return "malformed query:started";
        const q = (p.queryId as string | undefined) ?? "";
        if (q) this.st.activeQueryId = q;
        else delete this.st.activeQueryId;
        const started: Turn = { queryId: q, status: "running" };
        if (ts && !isZeroTime(ts)) started.startedAt = ts;
        this.writableTurns().push(started);
        return undefined;
      }
      case "query:completed":
      case "query:failed": {
        const failed = e.type === "query:failed";
        const shape: [string, string][] = [["queryId", "string"], ["interrupted", "boolean"], ["durationMs", "integer"]];
        if (failed) shape.push(["error", "string"], ["code", "string"]);
        else shape.push(["result", "string"]);
        if (!shape.every(([k, t]) => optional(p, k, t))) return `malformed ${e.type}`;
        const q = (p.queryId as string | undefined) ?? "";
        if (this.st.activeQueryId === q || q === "") delete this.st.activeQueryId;
        // The latest turn with this queryId; an end without a start records nothing.
        const turns = this.turns ?? this.st.turns;
        let at = turns.length - 1;
        while (at >= 0 && turns[at]!.queryId !== q) at--;
        if (at < 0) return undefined;
        // Like Go's omitempty: only what is set, so a live state equals the snapshot.
        const t: Turn = { queryId: q, status: failed ? "failed" : "completed" };
        if (p.interrupted === true) t.interrupted = true;
        if (failed) {
          setOpt(t, "error", p.error);
          setOpt(t, "code", p.code);
        }
        if (typeof p.durationMs === "number" && p.durationMs !== 0) t.durationMs = p.durationMs;
        if (!failed) setOpt(t, "result", p.result);
        const prev = turns[at]!;
        if (prev.startedAt) t.startedAt = prev.startedAt;
        if (prev.usage) t.usage = prev.usage;
        if (this.main.length > 0) t.afterBlock = this.main.length;
        this.writableTurns()[at] = t;
        return undefined;
      }
      case "permission:requested": {
        if (typeof p.requestId !== "string") return "permission without requestId";
        if (!this.pending) this.pending = this.st.pendingPermissions.slice();
        const req = p as unknown as PermissionRequestedPayload;
        const at = this.pending.findIndex((x) => x.requestId === req.requestId);
        if (at >= 0) this.pending[at] = req;
        else this.pending.push(req);
        return undefined;
      }
      case "permission:resolved": {
        if (!["requestId", "behavior", "by", "message", "toolName", "scope"].every((k) => optional(p, k, "string"))) return "malformed permission:resolved";
        if (!this.pending) this.pending = this.st.pendingPermissions.slice();
        this.pending = this.pending.filter((x) => x.requestId !== p.requestId);
        const tool = p.toolName;
        if (p.scope === "session" && p.behavior === "allow" && typeof tool === "string" && tool !== "") {
          const rules = this.rules ?? this.st.permissionRules;
          if (!rules.some((r) => r.toolName === tool)) {
            if (!this.rules) this.rules = this.st.permissionRules.slice();
            this.rules.push({ toolName: tool, behavior: "allow" });
          }
        }
        return undefined;
      }
      case "message:queued": {
        if (!optional(p, "messageId", "string") || !optional(p, "content", "string")) return "malformed message:queued";
        if (!this.queue) this.queue = this.st.queuedMessages.slice();
        const m: QueuedMessage = { id: (p.messageId as string | undefined) ?? "", content: (p.content as string | undefined) ?? "" };
        if (ts && !isZeroTime(ts)) m.queuedAt = ts;
        const actor = isObject(e.context) ? e.context.actor : undefined;
        if (typeof actor === "string" && actor !== "") m.actor = actor;
        if (Array.isArray(p.attachments) && p.attachments.length > 0) m.attachments = p.attachments as ArtifactRef[];
        const at = this.queue.findIndex((x) => x.id === m.id);
        if (at >= 0) this.queue[at] = m;
        else this.queue.push(m);
        return undefined;
      }
      case "message:dequeued":
      case "message:cancelled": {
        if (!optional(p, "messageId", "string")) return `malformed ${e.type}`;
        const id = (p.messageId as string | undefined) ?? "";
        const q = this.queue ?? this.st.queuedMessages;
        if (q.some((x) => x.id === id)) this.queue = q.filter((x) => x.id !== id);
        return undefined;
      }
      case "file:created":
      case "file:modified":
      case "file:deleted": {
        if (typeof p.path !== "string") return "file event without path";
        if (!this.files) this.files = new Map(this.st.workspaceFiles.map((f) => [f.path, f]));
        if (e.type === "file:deleted") this.files.delete(p.path);
        else {
          const f: WorkspaceFile = { path: p.path };
          if (typeof p.size === "number") f.size = p.size;
          if (typeof p.sha256 === "string" && p.sha256 !== "") f.sha256 = p.sha256;
          this.files.set(p.path, f);
        }
        return undefined;
      }
      case "subagent:spawned": {
        if (typeof p.toolUseId !== "string") return "subagent without toolUseId";
        const s = this.subagent(p.toolUseId).meta;
        s.toolUseId = p.toolUseId;
        setOpt(s, "agentId", firstNonEmpty(p.agentId, s.agentId));
        setOpt(s, "prompt", p.prompt);
        setOpt(s, "subagentType", p.subagentType);
        setOpt(s, "description", p.description);
        s.status = "pending";
        return undefined;
      }
      case "subagent:completed": {
        if (typeof p.toolUseId !== "string") return "subagent without toolUseId";
        const s = this.subagent(p.toolUseId).meta;
        setOpt(s, "agentId", firstNonEmpty(p.agentId, s.agentId));
        s.status = (typeof p.status === "string" ? p.status : "") as Subagent["status"];
        setOpt(s, "output", p.output);
        if (typeof p.durationMs === "number" && p.durationMs !== 0) s.durationMs = p.durationMs;
        else delete s.durationMs;
        return undefined;
      }
      case "error": {
        // Keyed by position in the list: unique even for unsequenced events.
        const key = `error-${(this.notices ?? this.st.errorNotices).length}`;
        const n: Notice = { key, seq, kind: "error", message: String(p.message ?? ""), afterBlock: this.main.length };
        if (typeof p.code === "string") n.code = p.code;
        if (ts) n.timestamp = ts;
        this.addNotice(n);
        return undefined;
      }
      case "options:update": {
        if (isObject(p.sessionOptions)) this.st.sessionOptions = p.sessionOptions as ConversationState["sessionOptions"];
        return undefined;
      }
      case "log":
        return undefined;
      default:
        return `unknown event type "${(e as { type: string }).type}"`;
    }
  }

  finish(): ConversationState {
    const st = this.st;
    st.blocks = this.main.finish();
    if (this.subList) {
      if (this.subs) for (const s of this.subs.values()) s.meta.blocks = s.thread.finish();
      st.subagents = this.subList;
    }
    if (this.pending) st.pendingPermissions = this.pending;
    if (this.files) {
      st.workspaceFiles = [...this.files.values()].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
    }
    if (this.notices) st.errorNotices = this.notices;
    if (this.turns) st.turns = this.turns;
    if (this.queue) st.queuedMessages = this.queue;
    if (this.rules) st.permissionRules = this.rules;
    return st;
  }
}

// setOpt sets an optional string field like Go's assignment of a possibly
// empty string with omitempty: empty removes it.
function setOpt<T extends object>(o: T, k: keyof T & string, v: unknown): void {
  const r = o as Record<string, unknown>;
  if (typeof v === "string" && v !== "") r[k] = v;
  else delete r[k];
}

// optional reports whether o[k] is absent or of JSON type t, as Go's decoding
// into a typed field demands (null counts as absent).
function optional(o: Record<string, unknown>, k: string, t: string): boolean {
  const v = o[k];
  if (v === undefined || v === null) return true;
  return t === "integer" ? Number.isSafeInteger(v) : typeof v === t;
}

function addUsage(a: Usage, u: Partial<Usage>): Usage {
  const next: Usage = { inputTokens: a.inputTokens + (u.inputTokens ?? 0), outputTokens: a.outputTokens + (u.outputTokens ?? 0) };
  const cr = (a.cacheReadInputTokens ?? 0) + (u.cacheReadInputTokens ?? 0);
  const cc = (a.cacheCreationInputTokens ?? 0) + (u.cacheCreationInputTokens ?? 0);
  if (cr) next.cacheReadInputTokens = cr;
  if (cc) next.cacheCreationInputTokens = cc;
  return next;
}

// Go omits a zero time.Time (omitzero): so does this reducer.
function isZeroTime(ts: string): boolean {
  return ts.startsWith("0001-01-01T00:00:00");
}

function firstNonEmpty(a: unknown, b: unknown): string | undefined {
  if (typeof a === "string" && a !== "") return a;
  if (typeof b === "string" && b !== "") return b;
  return undefined;
}
