import { describe, expect, it } from "vitest";
import {
  applyBatch,
  applyEvent,
  Conversation,
  initialState,
  noticesOf,
  reduce,
  reduceAll,
  stateFromSnapshot,
  type AgentEvent,
  type Turn,
} from "../src/index.js";
import { ev } from "./helpers.js";

describe("block:upsert", () => {
  it("creates a block, then shallow-merges only the fields present", () => {
    const st = reduceAll([
      ev(1, "block:upsert", { block: { id: "t1", type: "tool_use", toolName: "Bash", input: { command: "ls" }, status: "pending" } }),
      ev(2, "block:upsert", { block: { id: "t1", type: "tool_use", status: "complete" } }),
    ]);
    // Also what the reducer fills in: the first event's time, the required toolUseId.
    expect(st.blocks).toEqual([{ id: "t1", type: "tool_use", toolName: "Bash", input: { command: "ls" }, status: "complete", toolUseId: "", timestamp: st.blocks[0]!.timestamp }]);
    expect(st.blocks[0]!.timestamp).toMatch(/^2026-11-2/);
    expect(st.lastSeq).toBe(2);
  });

  it("merges metadata keys one level, like Go's unmarshal onto a map", () => {
    const st = reduceAll([
      ev(1, "block:upsert", { block: { id: "b", type: "assistant_text", metadata: { a: 1, b: { x: 1 } } } }),
      ev(2, "block:upsert", { block: { id: "b", type: "assistant_text", metadata: { b: { y: 2 }, c: 3 } } }),
    ]);
    expect(st.blocks[0]!.metadata).toEqual({ a: 1, b: { y: 2 }, c: 3 });
  });

  it("treats null as no change for scalars, null input as null, null metadata as removal", () => {
    const st = reduceAll([
      ev(1, "block:upsert", { block: { id: "b", type: "tool_use", toolName: "Read", input: { p: 1 }, metadata: { k: 1 } } }),
      ev(2, "block:upsert", { block: { id: "b", type: "tool_use", toolName: null, input: null, metadata: null } as never }),
    ]);
    expect(st.blocks[0]).toMatchObject({ id: "b", type: "tool_use", toolName: "Read", input: null });
    expect(st.blocks[0]!.metadata).toBeUndefined();
  });

  it("rejects a block without id but still consumes the seq", () => {
    const r = applyEvent(initialState(), ev(1, "block:upsert", { block: { type: "assistant_text" } as never }));
    expect(r.outcome).toBe("error");
    expect(r.state.blocks).toHaveLength(0);
    expect(r.state.lastSeq).toBe(1);
  });

  it("keeps block order by first appearance", () => {
    const st = reduceAll([
      ev(1, "block:upsert", { block: { id: "a", type: "user_message", content: "hi" } }),
      ev(2, "block:upsert", { block: { id: "b", type: "assistant_text", content: "x" } }),
      ev(3, "block:upsert", { block: { id: "a", type: "user_message", status: "complete" } }),
    ]);
    expect(st.blocks.map((b) => b.id)).toEqual(["a", "b"]);
  });
});

describe("required fields", () => {
  it("fills what Go's reducer fills: the event's time, required fields, a pending status", () => {
    const evs = [
      ev(1, "block:upsert", { block: { id: "r", type: "tool_result" } }),
      ev(2, "block:upsert", { block: { id: "u", type: "tool_use", status: "" as never, timestamp: "2020-01-01T00:00:00Z" } }),
      ev(3, "block:upsert", { block: { id: "r", type: "tool_result", isError: true } }),
    ];
    const st = reduceAll(evs);
    // The block keeps the time of the event that created it.
    expect(st.blocks[0]).toEqual({ id: "r", type: "tool_result", toolUseId: "", output: "", isError: true, timestamp: evs[0]!.context.timestamp });
    expect(evs[0]!.context.timestamp).not.toBe(evs[2]!.context.timestamp);
    expect(st.blocks[1]).toEqual({ id: "u", type: "tool_use", toolName: "", toolUseId: "", input: {}, status: "pending", timestamp: "2020-01-01T00:00:00Z" });
  });
});

describe("block:delta", () => {
  it("appends to content for text blocks", () => {
    const st = reduceAll([
      ev(1, "block:upsert", { block: { id: "m-0", type: "assistant_text" } }),
      ev(2, "block:delta", { blockId: "m-0", delta: "Hel" }),
      ev(3, "block:delta", { blockId: "m-0", delta: "lo" }),
    ]);
    expect(st.blocks[0]!.content).toBe("Hello");
    expect(st.blocks[0]!.output).toBeUndefined();
  });

  it("appends to output for tool_result and subagent blocks", () => {
    const st = reduceAll([
      ev(1, "block:upsert", { block: { id: "tu-result", type: "tool_result", toolUseId: "tu", output: "line 1\n" } }),
      ev(2, "block:delta", { blockId: "tu-result", delta: "line 2\n" }),
      ev(3, "block:upsert", { block: { id: "sa", type: "subagent", toolUseId: "sa" } }),
      ev(4, "block:delta", { blockId: "sa", delta: "done" }),
    ]);
    expect(st.blocks[0]!.output).toBe("line 1\nline 2\n");
    expect(st.blocks[0]!.content).toBeUndefined();
    expect(st.blocks[1]!.output).toBe("done");
  });

  it("reports a delta for an unknown block as an error, consuming the seq", () => {
    const r = applyEvent(initialState(), ev(1, "block:delta", { blockId: "nope", delta: "x" }));
    expect(r.outcome).toBe("error");
    expect(r.error).toContain("unknown block");
    expect(r.state.lastSeq).toBe(1);
  });

  it("rejects a malformed delta payload", () => {
    const r = applyEvent(initialState(), ev(1, "block:delta", { blockId: 3, delta: null } as never));
    expect(r.outcome).toBe("error");
  });
});

describe("seq handling", () => {
  const log = [
    ev(1, "block:upsert", { block: { id: "a", type: "assistant_text", content: "A" } }),
    ev(2, "block:delta", { blockId: "a", delta: "B" }),
    ev(3, "block:delta", { blockId: "a", delta: "C" }),
  ];

  it("ignores duplicates: replaying an overlap changes nothing", () => {
    const once = reduceAll(log);
    const twice = reduceAll([...log, log[1]!, log[2]!, ...log]);
    expect(twice.blocks).toEqual(once.blocks);
    expect(twice.blocks[0]!.content).toBe("ABC");
  });

  it("returns the same state object for a duplicate", () => {
    const st = reduceAll(log);
    const r = applyEvent(st, log[1]!);
    expect(r.outcome).toBe("duplicate");
    expect(r.state).toBe(st);
  });

  it("ignores an event that arrives after a higher seq (out of order)", () => {
    const st = reduceAll([log[0]!, log[2]!, log[1]!]);
    expect(st.blocks[0]!.content).toBe("AC");
    expect(st.lastSeq).toBe(3);
  });

  it("always applies unsequenced (seq 0) events", () => {
    const st = reduceAll([log[0]!, ev(0, "block:delta", { blockId: "a", delta: "x" }), ev(0, "block:delta", { blockId: "a", delta: "x" })]);
    expect(st.blocks[0]!.content).toBe("Axx");
    expect(st.lastSeq).toBe(1);
  });

  it("rejects an unknown event type but consumes its seq", () => {
    const r = applyEvent(initialState(), { ...ev(1, "log", { level: "info", message: "" }), type: "bogus" } as unknown as AgentEvent);
    expect(r.outcome).toBe("error");
    expect(r.state.lastSeq).toBe(1);
  });

  it("survives garbage without throwing", () => {
    let st = initialState();
    for (const junk of [null, 42, "x", {}, { type: 1 }, { seq: 1, type: "status", payload: null }] as unknown[]) {
      st = reduce(st, junk as AgentEvent);
    }
    expect(st.blocks).toHaveLength(0);
  });
});

describe("subagents", () => {
  it("routes blocks by conversationId to subagent threads", () => {
    const st = reduceAll([
      ev(1, "block:upsert", { block: { id: "toolu_1", type: "tool_use", toolName: "Task" } }),
      ev(2, "subagent:spawned", { toolUseId: "toolu_1", prompt: "look around", subagentType: "explorer" }),
      ev(3, "block:upsert", { block: { id: "m2-0", type: "assistant_text", content: "sub " } }, "toolu_1"),
      ev(4, "block:delta", { blockId: "m2-0", delta: "text" }, "toolu_1"),
      ev(5, "subagent:completed", { toolUseId: "toolu_1", status: "complete", output: "found it", durationMs: 12 }),
    ]);
    expect(st.blocks.map((b) => b.id)).toEqual(["toolu_1"]);
    expect(st.subagents).toHaveLength(1);
    const s = st.subagents[0]!;
    expect(s).toMatchObject({ id: "toolu_1", toolUseId: "toolu_1", prompt: "look around", subagentType: "explorer", status: "complete", output: "found it", durationMs: 12 });
    expect(s.blocks).toEqual([{ id: "m2-0", type: "assistant_text", content: "sub text", timestamp: s.blocks[0]!.timestamp }]);
  });

  it("creates a pending subagent thread for blocks that arrive before subagent:spawned", () => {
    const st = reduceAll([ev(1, "block:upsert", { block: { id: "x", type: "assistant_text" } }, "toolu_9")]);
    expect(st.subagents[0]).toMatchObject({ id: "toolu_9", status: "pending" });
    expect(st.blocks).toHaveLength(0);
  });

  it("does not find a main block from a subagent delta", () => {
    const r = applyEvent(reduceAll([ev(1, "block:upsert", { block: { id: "a", type: "assistant_text" } })]), ev(2, "block:delta", { blockId: "a", delta: "x" }, "toolu_1"));
    expect(r.outcome).toBe("error");
  });
});

describe("session-level events", () => {
  it("sums metadata:update increments", () => {
    const st = reduceAll([
      ev(1, "metadata:update", { usage: { inputTokens: 10, outputTokens: 5 }, costUSD: 0.01, model: "m1" }),
      ev(2, "metadata:update", { usage: { inputTokens: 1, outputTokens: 2, cacheReadInputTokens: 7 }, costUSD: 0.02 }),
      ev(3, "metadata:update", { model: "" }),
    ]);
    expect(st.usage).toEqual({ inputTokens: 11, outputTokens: 7, cacheReadInputTokens: 7 });
    expect(st.costUSD).toBeCloseTo(0.03);
    expect(st.model).toBe("m1");
  });

  it("tracks pending permissions in request order", () => {
    const exp = "2026-11-21T23:50:00Z";
    const st = reduceAll([
      ev(1, "permission:requested", { requestId: "r1", toolName: "Bash", input: {}, expiresAt: exp }),
      ev(2, "permission:requested", { requestId: "r2", toolName: "Write", input: {}, expiresAt: exp }),
      ev(3, "permission:resolved", { requestId: "r1", behavior: "allow", by: "user" }),
    ]);
    expect(st.pendingPermissions.map((p) => p.requestId)).toEqual(["r2"]);
  });

  it("keeps the workspace file list sorted and applies deletes", () => {
    const st = reduceAll([
      ev(1, "file:created", { path: "b.txt", size: 0 }),
      ev(2, "file:created", { path: "a/x.go", size: 3, sha256: "abc" }),
      ev(3, "file:modified", { path: "b.txt", size: 5 }),
      ev(4, "file:created", { path: "c" }),
      ev(5, "file:deleted", { path: "c" }),
    ]);
    expect(st.workspaceFiles).toEqual([
      { path: "a/x.go", size: 3, sha256: "abc" },
      { path: "b.txt", size: 5 },
    ]);
  });

  it("tracks the active query and records each turn and how it ended", () => {
    let st = reduceAll([
      ev(1, "block:upsert", { block: { id: "u", type: "user_message", content: "x" } }),
      ev(2, "query:started", { queryId: "q1", content: "x" }),
    ]);
    expect(st.activeQueryId).toBe("q1");
    expect(noStart(st.turns)).toEqual([{ queryId: "q1", status: "running" }]);
    st = reduce(st, ev(3, "query:failed", { queryId: "q1", error: "server restarted", code: "INTERRUPTED", durationMs: 4 }));
    expect(st.activeQueryId).toBeUndefined();
    expect(noStart(st.turns)).toEqual([{ queryId: "q1", status: "failed", error: "server restarted", code: "INTERRUPTED", durationMs: 4, afterBlock: 1 }]);
    st = reduceAll([
      ev(4, "query:started", { queryId: "q2" }),
      ev(5, "block:upsert", { block: { id: "a", type: "assistant_text", content: "partial" } }),
      ev(6, "query:completed", { queryId: "q2", interrupted: true }),
      ev(7, "query:started", { queryId: "q3" }),
      ev(8, "query:completed", { queryId: "q3", result: "fine", durationMs: 0 }),
    ], st);
    expect(noStart(st.turns.slice(1))).toEqual([
      { queryId: "q2", status: "completed", interrupted: true, afterBlock: 2 },
      { queryId: "q3", status: "completed", result: "fine", afterBlock: 2 },
    ]);
    expect(noticesOf(st).map((n) => [n.kind, n.message, n.afterBlock, n.key])).toEqual([
      ["turn_failed", "server restarted", 1, "turn-0"],
      ["turn_interrupted", "turn interrupted", 2, "turn-1"],
    ]);
    expect(noticesOf(st)[0]!.code).toBe("INTERRUPTED");
    // A completion for another query leaves the active one alone (Go: endQuery),
    // and an end for a query that never started records no turn.
    st = reduceAll([ev(9, "query:started", { queryId: "q4" }), ev(10, "query:completed", { queryId: "q9" })], st);
    expect(st.activeQueryId).toBe("q4");
    expect(st.turns.map((t) => [t.queryId, t.status])).toEqual([["q1", "failed"], ["q2", "completed"], ["q3", "completed"], ["q4", "running"]]);
  });

  it("ends the latest turn with a reused queryId, the last end replacing the outcome", () => {
    const st = reduceAll([
      ev(1, "query:started", { queryId: "q" }),
      ev(2, "query:started", { queryId: "q" }),
      ev(3, "query:failed", { queryId: "q", error: "first", code: "C", interrupted: true }),
      ev(4, "query:completed", { queryId: "q", result: "ok" }),
    ]);
    expect(noStart(st.turns)).toEqual([{ queryId: "q", status: "running" }, { queryId: "q", status: "completed", result: "ok" }]);
  });

  it("rejects malformed query events without touching the turns", () => {
    const st = reduceAll([ev(1, "query:started", { queryId: "q1" })]);
    for (const [type, payload] of [
      ["query:started", { queryId: 7 }],
      ["query:failed", { queryId: "q1", error: false }],
      ["query:completed", { queryId: "q1", durationMs: 1.5 }],
      ["query:completed", { queryId: "q1", interrupted: "yes" }],
    ] as const) {
      const r = applyEvent(st, ev(2, type, payload as never));
      expect(r.outcome, JSON.stringify(payload)).toBe("error");
      expect(r.state.turns).toBe(st.turns);
      expect(r.state.activeQueryId).toBe("q1");
    }
  });

  it("orders error-event notices with turn notices by position, an error first at the same spot", () => {
    const st = reduceAll([
      ev(1, "block:upsert", { block: { id: "u", type: "user_message", content: "x" } }),
      ev(2, "query:started", { queryId: "q1" }),
      ev(3, "error", { message: "budget", code: "BUDGET_EXCEEDED" }),
      ev(4, "query:failed", { queryId: "q1", error: "budget", code: "BUDGET_EXCEEDED" }),
      ev(5, "block:upsert", { block: { id: "u2", type: "user_message", content: "y" } }),
      ev(6, "block:upsert", { block: { id: "a2", type: "assistant_text", content: "z" } }),
      ev(7, "error", { message: "later" }),
      ev(8, "query:started", { queryId: "q2" }),
    ]);
    expect(st.errorNotices.map((n) => [n.key, n.seq, n.code])).toEqual([["error-0", 3, "BUDGET_EXCEEDED"], ["error-1", 7, undefined]]);
    expect(noticesOf(st).map((n) => `${n.kind}@${n.afterBlock}`)).toEqual(["error@1", "turn_failed@1", "error@3"]);
    expect(noticesOf({ turns: [], errorNotices: [] })).toEqual([]);
  });

  it("sets status and runtime", () => {
    const st = reduce(initialState(), ev(1, "status", { status: "running", runtime: { status: "running", architecture: "shell" } }));
    expect(st.status).toBe("running");
    expect(st.runtime.architecture).toBe("shell");
  });
});

describe("immutability and sharing", () => {
  it("never changes an old state and keeps untouched blocks by identity", () => {
    const s1 = reduceAll([
      ev(1, "block:upsert", { block: { id: "a", type: "assistant_text", content: "A" } }),
      ev(2, "block:upsert", { block: { id: "b", type: "assistant_text", content: "B" } }),
    ]);
    const snapshot = JSON.stringify(s1);
    const s2 = reduce(s1, ev(3, "block:delta", { blockId: "b", delta: "!" }));
    expect(JSON.stringify(s1)).toBe(snapshot);
    expect(s2.blocks[0]).toBe(s1.blocks[0]);
    expect(s2.blocks[1]).not.toBe(s1.blocks[1]);
    expect(s2.blocks[1]!.content).toBe("B!");
  });

  it("gives correct results when two states branch from one", () => {
    const base = reduceAll([ev(1, "block:upsert", { block: { id: "a", type: "assistant_text" } })]);
    const left = reduce(base, ev(2, "block:upsert", { block: { id: "x", type: "assistant_text", content: "L" } }));
    const right = reduce(base, ev(2, "block:upsert", { block: { id: "y", type: "assistant_text", content: "R" } }));
    const left2 = reduce(left, ev(3, "block:delta", { blockId: "x", delta: "1" }));
    const right2 = reduce(right, ev(3, "block:upsert", { block: { id: "x", type: "assistant_text", content: "late" } }));
    const left3 = reduce(left2, ev(4, "block:delta", { blockId: "x", delta: "2" }));
    expect(left3.blocks.map((b) => [b.id, b.content ?? ""])).toEqual([["a", ""], ["x", "L12"]]);
    expect(right2.blocks.map((b) => [b.id, b.content ?? ""])).toEqual([["a", ""], ["y", "R"], ["x", "late"]]);
    expect(reduce(base, ev(2, "block:delta", { blockId: "x", delta: "?" })).blocks).toHaveLength(1);
  });

  it("applies a batch like event-by-event application", () => {
    const log: AgentEvent[] = [ev(1, "block:upsert", { block: { id: "a", type: "tool_result", output: "" } })];
    for (let i = 2; i < 200; i++) log.push(ev(i, "block:delta", { blockId: "a", delta: `${i}\n` }));
    const one = log.reduce(reduce, initialState());
    const batch = applyBatch(initialState(), log);
    expect(batch.applied).toBe(log.length);
    expect(batch.state.blocks).toEqual(one.blocks);
  });

  it("keeps the turns of a server snapshot: a reload has the same notices as the live state", () => {
    const log = [
      ev(1, "block:upsert", { block: { id: "q1-user", type: "user_message", content: "x" } }),
      ev(2, "query:started", { queryId: "q1" }),
      ev(3, "block:upsert", { block: { id: "e", type: "error", message: "API Error: 400" } }),
      ev(4, "query:failed", { queryId: "q1", error: "API Error: 400", code: "MODEL_ERROR", durationMs: 9 }),
    ];
    const live = reduceAll(log);
    // What GET /api/sessions/{id} sends: the Go state as JSON.
    const snap = stateFromSnapshot(JSON.parse(JSON.stringify({ ...live, errorNotices: undefined })));
    expect(snap.turns).toEqual(live.turns);
    expect(noticesOf(snap)).toEqual(noticesOf(live));
    expect(noticesOf(snap)).toHaveLength(1);
    // Following the log from lastSeq adds no second notice for the same turn.
    const after = applyEvent(snap, log[3]!);
    expect(after.outcome).toBe("duplicate");
    expect(noticesOf(reduce(snap, ev(5, "query:started", { queryId: "q2" })))).toHaveLength(1);
    expect(stateFromSnapshot({}).turns).toEqual([]);
  });

  it("places turns among the blocks of a paged snapshot", () => {
    const snap = stateFromSnapshot({
      blockOffset: 10,
      blocks: [{ id: "b10", type: "user_message", content: "x" }],
      turns: [
        { queryId: "q1", status: "completed", afterBlock: 4 },
        { queryId: "q2", status: "completed", afterBlock: 11 },
        { queryId: "q3", status: "running" },
      ],
    });
    expect(snap.turns.map((t) => t.afterBlock)).toEqual([0, 1, undefined]);
  });

  it("resumes from a server snapshot", () => {
    const st = stateFromSnapshot({ lastSeq: 7, blocks: [{ id: "a", type: "assistant_text", content: "x" }], status: "idle" });
    expect(applyEvent(st, ev(7, "block:delta", { blockId: "a", delta: "dup" })).outcome).toBe("duplicate");
    expect(reduce(st, ev(8, "block:delta", { blockId: "a", delta: "y" })).blocks[0]!.content).toBe("xy");
  });
});

describe("Conversation", () => {
  it("batches pushes: 10,000 deltas notify listeners once per scheduler tick", () => {
    const ticks: (() => void)[] = [];
    const c = new Conversation({ schedule: (cb) => ticks.push(cb) });
    let notified = 0;
    c.subscribe(() => notified++);
    c.push(ev(1, "block:upsert", { block: { id: "r", type: "tool_result", output: "" } }));
    for (let i = 0; i < 10_000; i++) c.push(ev(i + 2, "block:delta", { blockId: "r", delta: "x" }));
    expect(ticks).toHaveLength(1);
    expect(c.lastSeq).toBe(10_001); // queued events count for resuming
    expect(notified).toBe(0);
    ticks.shift()!();
    expect(notified).toBe(1);
    expect(c.state.blocks[0]!.output).toHaveLength(10_000);
  });

  it("counts duplicates and reports errors", () => {
    const errors: string[] = [];
    const c = new Conversation({ onError: (m) => errors.push(m) });
    const e1 = ev(1, "block:upsert", { block: { id: "a", type: "assistant_text" } });
    c.push(e1);
    c.push(e1);
    c.push(ev(2, "block:delta", { blockId: "zz", delta: "x" }));
    expect(c.duplicates).toBe(1);
    expect(errors).toHaveLength(1);
    expect(c.lastSeq).toBe(2);
  });
});

/** Turns without their start times (the helper's clock makes them). */
function noStart(turns: readonly Turn[]): Omit<Turn, "startedAt">[] {
  return turns.map(({ startedAt: _s, ...t }) => t);
}

describe("queue, rules and turn progress", () => {
  it("keeps queued messages in order until dequeued or cancelled", () => {
    const st = reduceAll([
      ev(1, "message:queued", { messageId: "m1", content: "one" }),
      ev(2, "message:queued", { messageId: "m2", content: "two" }),
      ev(3, "message:queued", { messageId: "m3", content: "three" }),
      ev(4, "message:dequeued", { messageId: "m1", queryId: "q2" }),
      ev(5, "message:cancelled", { messageId: "m3" }),
    ]);
    expect(st.queuedMessages.map((m) => [m.id, m.content])).toEqual([["m2", "two"]]);
    expect(st.queuedMessages[0]!.queuedAt).toMatch(/^\d{4}-/);
  });

  it("adds a rule for an allow with scope session, once per tool", () => {
    const st = reduceAll([
      ev(1, "permission:resolved", { requestId: "a", behavior: "allow", by: "user", toolName: "Bash", scope: "session" }),
      ev(2, "permission:resolved", { requestId: "b", behavior: "allow", by: "rule", toolName: "Bash" }),
      ev(3, "permission:resolved", { requestId: "c", behavior: "allow", by: "user", toolName: "Bash", scope: "session" }),
      ev(4, "permission:resolved", { requestId: "d", behavior: "deny", by: "user", toolName: "Edit", scope: "session" }),
    ]);
    expect(st.permissionRules).toEqual([{ toolName: "Bash", behavior: "allow" }]);
  });

  it("sums the usage reported while a turn runs into the turn", () => {
    const st = reduceAll([
      ev(1, "query:started", { queryId: "q1" }),
      ev(2, "metadata:update", { usage: { inputTokens: 5, outputTokens: 1 } }),
      ev(3, "metadata:update", { usage: { inputTokens: 2, outputTokens: 2 } }),
      ev(4, "query:completed", { queryId: "q1" }),
      ev(5, "metadata:update", { usage: { inputTokens: 100, outputTokens: 100 } }),
    ]);
    expect(st.turns[0]!.usage).toEqual({ inputTokens: 7, outputTokens: 3 });
    expect(st.turns[0]!.startedAt).toMatch(/^\d{4}-/);
    expect(st.usage.inputTokens).toBe(107);
  });
});
