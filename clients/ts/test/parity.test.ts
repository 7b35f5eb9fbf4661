// Parity with the Go reducer: random logs are reduced by this package and by
// conversation.Reduce (through test/goref, run with `go run`), and the states
// must agree. Skipped when no Go toolchain is on PATH.
import { execFileSync, spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { reduceAll, type AgentEvent, type AnyBlock, type EventType } from "../src/index.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const hasGo = spawnSync("go", ["version"]).status === 0;

// mulberry32: a small seeded PRNG so failures reproduce.
function rng(seed: number): () => number {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomLog(seed: number): AgentEvent[] {
  const r = rng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const convs = ["main", "main", "main", "toolu_A", "toolu_B"];
  const ids = ["m1-0", "m1-1", "toolu_A", "toolu_A-result", "m2-0", "x"];
  const types = ["assistant_text", "thinking", "tool_use", "tool_result", "subagent", "user_message", "error", "system"] as const;
  const events: AgentEvent[] = [];
  let seq = 0;
  const n = 5 + Math.floor(r() * 60);
  for (let i = 0; i < n; i++) {
    const k = r();
    let type: EventType;
    let payload: unknown;
    if (k < 0.35) {
      type = "block:upsert";
      const b: Record<string, unknown> = { id: pick(ids), type: pick(types) };
      if (r() < 0.5) b.content = pick(["", "hello ", "wörld", "a\nb"]);
      if (r() < 0.3) b.output = pick(["out", ""]);
      if (r() < 0.3) b.status = pick(["pending", "complete", "error"]);
      if (r() < 0.2) b.toolName = pick(["Bash", "Edit"]);
      if (r() < 0.2) b.input = pick([{ command: "ls" }, { a: [1, 2] }, null]);
      if (r() < 0.2) b.isError = r() < 0.5;
      if (r() < 0.2) b.durationMs = Math.floor(r() * 100);
      if (r() < 0.2) b.metadata = pick([{ a: 1 }, { b: "x" }, null, {}]);
      if (r() < 0.2) b.timestamp = "2026-11-21T23:47:49.108Z";
      payload = { block: b };
    } else if (k < 0.6) {
      type = "block:delta";
      payload = { blockId: pick(ids), delta: pick(["x", "yz", "\n", "é"]) };
    } else if (k < 0.66) {
      type = "metadata:update";
      payload = { usage: { inputTokens: Math.floor(r() * 10), outputTokens: Math.floor(r() * 10) }, ...(r() < 0.5 ? { costUSD: 0.25 } : {}), ...(r() < 0.3 ? { model: pick(["m1", "m2"]) } : {}) };
    } else if (k < 0.72) {
      type = pick(["permission:requested", "permission:resolved"] as const);
      payload = type === "permission:requested"
        ? { requestId: pick(["r1", "r2"]), toolName: "Bash", input: { c: 1 }, expiresAt: "2026-11-21T23:50:00.5Z" }
        : {
            requestId: pick(["r1", "r2"]),
            behavior: pick(["allow", "allow", "deny"]),
            by: pick(["user", "rule"]),
            ...(r() < 0.6 ? { toolName: pick(["Bash", "Write", ""]) } : {}),
            ...(r() < 0.6 ? { scope: pick(["session", "once"]) } : {}),
          };
    } else if (k < 0.8) {
      type = pick(["file:created", "file:modified", "file:deleted"] as const);
      payload = { path: pick(["a.txt", "dir/b.go", "c"]), ...(r() < 0.5 ? { size: Math.floor(r() * 3) } : {}) };
    } else if (k < 0.86) {
      type = pick(["subagent:spawned", "subagent:completed"] as const);
      payload = type === "subagent:spawned"
        ? { toolUseId: pick(["toolu_A", "toolu_B"]), prompt: "p", ...(r() < 0.5 ? { agentId: "ag" } : {}), ...(r() < 0.5 ? { subagentType: "t" } : {}) }
        : { toolUseId: pick(["toolu_A", "toolu_B"]), status: pick(["complete", "error"]), ...(r() < 0.5 ? { output: "o", durationMs: 5 } : {}) };
    } else if (k < 0.95) {
      // Turns: starts (reused ids too), ends with and without a start, every outcome field.
      type = pick(["query:started", "query:started", "query:completed", "query:failed"] as const);
      const p: Record<string, unknown> = { queryId: pick(["q1", "q2", "q3", ""]) };
      if (type === "query:started") {
        if (r() < 0.5) p.content = "do it";
      } else {
        if (r() < 0.4) p.interrupted = r() < 0.7;
        if (r() < 0.5) p.durationMs = Math.floor(r() * 3) * 17;
        if (type === "query:failed") {
          p.error = pick(["boom", "", "API Error: 400"]);
          if (r() < 0.5) p.code = pick(["MODEL_ERROR", "INTERRUPTED", ""]);
        } else if (r() < 0.5) p.result = pick(["done", ""]);
      }
      payload = p;
    } else if (k < 0.97) {
      type = pick(["message:queued", "message:queued", "message:dequeued", "message:cancelled"] as const);
      const id = pick(["m1", "m2", "m3"]);
      payload = type === "message:queued" ? { messageId: id, content: pick(["next", "then this"]) } : type === "message:dequeued" ? { messageId: id, queryId: "q9" } : { messageId: id };
    } else if (k < 0.985) {
      type = "status";
      payload = { status: pick(["running", "idle"]), runtime: { status: "running", architecture: "shell" } };
    } else {
      type = "options:update";
      payload = pick([{ sessionOptions: { model: pick(["m1", "m2"]) }, changed: ["model"] }, { sessionOptions: { model: "m3", permissionMode: "plan" } }, { sessionOptions: null }]);
    }
    // Mostly increasing seqs, with duplicates, reorderings and unsequenced events.
    const s = r();
    const thisSeq = s < 0.08 ? Math.max(1, seq - Math.floor(r() * 3)) : s < 0.12 ? 0 : ++seq;
    events.push({
      seq: thisSeq,
      type,
      payload,
      context: { sessionId: "s", conversationId: pick(convs), source: "runner", timestamp: pick(["2026-11-21T23:47:49.108Z", "2026-11-21T23:47:50Z"]), actor: pick([null, "alice"]) },
    } as AgentEvent);
  }
  return events;
}

// normalize drops what Go omits when empty and canonicalises times.
function normalize(v: unknown, key = ""): unknown {
  if (Array.isArray(v)) return v.map((x) => normalize(x));
  if (v && typeof v === "object") {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) {
      const n = normalize(x, k);
      if (n === undefined || n === "" || n === false || n === 0) continue;
      if (n && typeof n === "object" && !Array.isArray(n) && Object.keys(n).length === 0 && k !== "input") continue;
      out[k] = n;
    }
    return out;
  }
  if (typeof v === "string" && ["timestamp", "expiresAt", "startedAt", "queuedAt"].includes(key)) return new Date(v).toISOString();
  return v;
}

function tsState(events: AgentEvent[]): unknown {
  const st = reduceAll(events) as unknown as Record<string, unknown>;
  const { errorNotices: _n, ...goShape } = st;
  return normalize(goShape);
}

describe.skipIf(!hasGo)("parity with the Go reducer", () => {
  it("agrees on 300 random logs", { timeout: 180_000 }, () => {
    const logs = Array.from({ length: 300 }, (_, i) => randomLog(i + 1));
    const out = execFileSync("go", ["run", "./clients/ts/test/goref"], {
      cwd: repoRoot,
      input: JSON.stringify(logs),
      maxBuffer: 64 << 20,
    }).toString();
    const goStates = JSON.parse(out) as unknown[];
    expect(goStates).toHaveLength(logs.length);
    for (let i = 0; i < logs.length; i++) {
      expect(tsState(logs[i]!), `log seed ${i + 1}`).toEqual(normalize(goStates[i]));
    }
    // The generator reaches every kind of turn outcome, so the comparison covers them.
    const turns = goStates.flatMap((g) => (g as { turns: Record<string, unknown>[] }).turns);
    for (const want of [{ status: "running" }, { status: "failed", code: "MODEL_ERROR" }, { status: "completed", interrupted: true }, { status: "completed", result: "done" }]) {
      expect(turns.some((t) => Object.entries(want).every(([k, v]) => t[k] === v)), JSON.stringify(want)).toBe(true);
    }
    expect(turns.some((t) => typeof t.afterBlock === "number" && t.afterBlock > 0)).toBe(true);
    expect(turns.some((t) => typeof t.usage === "object" && typeof t.startedAt === "string" && t.status !== "running")).toBe(true);
    const st = goStates as { queuedMessages: unknown[]; permissionRules: unknown[] }[];
    expect(st.some((g) => g.queuedMessages.length > 1)).toBe(true);
    expect(goStates.some((g) => (g as { sessionOptions?: unknown }).sessionOptions !== undefined)).toBe(true);
    expect(st.some((g) => g.permissionRules.length > 0)).toBe(true);
  });

  it("agrees on a hand-written log with every event type", { timeout: 180_000 }, () => {
    const b = (x: AnyBlock) => ({ block: x });
    const log = [
      ["block:upsert", b({ id: "u", type: "user_message", content: "go" })],
      ["query:started", { queryId: "q1", content: "go" }],
      ["block:upsert", b({ id: "toolu_1", type: "tool_use", toolName: "Task", input: { prompt: "p" } })],
      ["subagent:spawned", { toolUseId: "toolu_1", prompt: "p" }],
      ["session:idle", {}],
      ["log", { level: "info", message: "m" }],
      ["error", { message: "e" }],
      ["query:completed", { queryId: "q1", durationMs: 3, result: "r" }],
      ["query:started", { queryId: "q2" }],
      ["query:failed", { queryId: "q2", error: "x", code: "C", interrupted: true, durationMs: 1 }],
      ["query:started", { queryId: "q3" }],
      ["metadata:update", { usage: { inputTokens: 3, outputTokens: 4, cacheReadInputTokens: 1 } }],
      ["message:queued", { messageId: "m1", content: "next" }],
      ["message:queued", { messageId: "m2", content: "later" }],
      ["message:dequeued", { messageId: "m1", queryId: "q4" }],
      ["message:cancelled", { messageId: "m9", reason: "x" }],
      ["permission:resolved", { requestId: "r", behavior: "allow", by: "user", toolName: "Write", scope: "session" }],
      ["options:update", { sessionOptions: { model: "m" }, changed: ["model"] }],
      ["block:upsert", b({ id: "toolu_2", type: "tool_use" })],
      ["block:upsert", b({ id: "toolu_2-result", type: "tool_result", toolUseId: "toolu_2" })],
      ["block:upsert", b({ id: "sa", type: "subagent" })],
    ].map(([type, payload], i) => ({ seq: i + 1, type, payload, context: { sessionId: "s", conversationId: "main", source: "runner", timestamp: "2026-11-21T23:47:49Z", actor: null } })) as AgentEvent[];
    const out = execFileSync("go", ["run", "./clients/ts/test/goref"], { cwd: repoRoot, input: JSON.stringify([log]) }).toString();
    const goState = normalize((JSON.parse(out) as unknown[])[0]) as { turns: unknown[] };
    expect(goState.turns).toHaveLength(3);
    expect(tsState(log)).toEqual(goState);
    // Without dropping empty values: the blocks carry the same required
    // fields, "" and false included, and the event's timestamp.
    const raw = (JSON.parse(out) as { blocks: AnyBlock[]; subagents: { blocks: AnyBlock[] }[] }[])[0]!;
    const ts = reduceAll(log);
    const times = (bs: readonly AnyBlock[]) => bs.map((x) => ({ ...x, ...(x.timestamp ? { timestamp: new Date(x.timestamp).toISOString() } : {}) }));
    expect(times(ts.blocks)).toEqual(times(raw.blocks));
    expect(ts.subagents.map((x) => times(x.blocks))).toEqual(raw.subagents.map((x) => times(x.blocks)));
    const result = ts.blocks.find((x) => x.id === "toolu_2-result")!;
    expect(result).toMatchObject({ output: "", isError: false, toolUseId: "toolu_2", timestamp: "2026-11-21T23:47:49Z" });
    expect(ts.blocks.find((x) => x.id === "sa")).toMatchObject({ subagentId: "", input: "", status: "pending" });
    expect(ts.sessionOptions).toEqual({ model: "m" });
  });
});
