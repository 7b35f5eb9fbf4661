// Parity with the Go reducer: random logs are reduced by this package and by
// conversation.Reduce (through test/goref, run with `go run`), and the states
// must agree. Skipped when no Go toolchain is on PATH.
import { execFileSync, spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { reduceAll, type AgentEvent, type AnyBlock } from "../src/index.js";
import { normalize, randomLog } from "./randomlog.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const hasGo = spawnSync("go", ["version"]).status === 0;

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
