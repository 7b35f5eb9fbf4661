// Random event logs for the parity tests: every event type, duplicates,
// reorderings and unsequenced events, from a seed so failures reproduce.
import type { AgentEvent, EventType } from "../src/index.js";

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

export function randomLog(seed: number): AgentEvent[] {
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
      if (r() < 0.15)
        b.truncated = pick([
          { field: "output", totalBytes: 9, tail: "xyz" },
          { field: "content", totalBytes: 5, tail: "", artifact: { sha256: "ab", size: 5, contentType: "text/plain; charset=utf-8" } },
          { field: "output", totalBytes: 7, tail: "t", artifactError: "quota" },
          null,
        ]);
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
export function normalize(v: unknown, key = ""): unknown {
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
