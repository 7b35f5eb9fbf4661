// The seed's clients on agentd: a client that runs the seed's reducer
// rules (agent-runtime's client reducer, restated here) on the per-type
// Socket.IO events agentd sends (internal/seedproto, run through
// test/goref -seed) holds the conversation agentd's Go reducer and this
// package's reducer build from the same log. Skipped without Go.
import { execFileSync, spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { reduceAll, type AgentEvent } from "../src/index.js";
import { normalize, randomLog } from "./randomlog.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const hasGo = spawnSync("go", ["version"]).status === 0;

type Block = Record<string, unknown> & { id: string; type: string };
interface SeedMessage { event: string; data?: Record<string, unknown> }

// The seed's rules: start appends (to a discovered subagent only), delta
// extends the content of assistant_text and thinking blocks, update is a
// shallow merge, complete replaces, discovered replaces a subagent's thread.
function seedReduce(messages: SeedMessage[]) {
  let main: Block[] = [];
  const subs = new Map<string, Block[]>();
  const files = new Map<string, unknown>();
  const thread = (conv: string) => (conv === "main" ? main : subs.get(conv));
  const setThread = (conv: string, bs: Block[]) => (conv === "main" ? (main = bs) : subs.set(conv, bs));
  for (const m of messages) {
    const d = m.data ?? {};
    const conv = d.conversationId as string;
    switch (m.event) {
      case "session:block:start": {
        const bs = thread(conv);
        if (bs) setThread(conv, [...bs, d.block as Block]);
        break;
      }
      case "session:block:delta": {
        const bs = thread(conv);
        if (bs) setThread(conv, bs.map((b) => (b.id === d.blockId && (b.type === "assistant_text" || b.type === "thinking") ? { ...b, content: (b.content as string) + (d.delta as string) } : b)));
        break;
      }
      case "session:block:update": {
        const bs = thread(conv);
        if (bs) setThread(conv, bs.map((b) => (b.id === d.blockId ? ({ ...b, ...(d.updates as object) } as Block) : b)));
        break;
      }
      case "session:block:complete": {
        const bs = thread(conv);
        if (bs) setThread(conv, bs.map((b) => (b.id === d.blockId ? (d.block as Block) : b)));
        break;
      }
      case "session:subagent:discovered": {
        const s = d.subagent as { id: string; blocks: Block[] };
        subs.set(s.id, s.blocks);
        break;
      }
      case "session:file:created":
      case "session:file:modified": {
        const f = d.file as { path: string };
        files.set(f.path, f);
        break;
      }
      case "session:file:deleted":
        files.delete(d.path as string);
        break;
    }
  }
  return { main, subs, files };
}

const dropNull = (v: unknown) => JSON.parse(JSON.stringify(v, (_, x) => (x === null ? undefined : x)));
const times = (bs: Block[]) => bs.map((b) => (typeof b.timestamp === "string" ? { ...b, timestamp: new Date(b.timestamp).toISOString() } : b));

describe.skipIf(!hasGo)("the seed's reducer on agentd's per-type events", () => {
  it("builds the conversation of both reducers on 300 random logs", { timeout: 180_000 }, () => {
    const logs: AgentEvent[][] = Array.from({ length: 300 }, (_, i) => randomLog(1000 + i));
    const out = execFileSync("go", ["run", "./clients/ts/test/goref", "-seed"], { cwd: repoRoot, input: JSON.stringify(logs), maxBuffer: 256 << 20 }).toString();
    const res = JSON.parse(out) as { messages: SeedMessage[] | null; state: { blocks: Block[]; subagents: { id: string; blocks: Block[] }[]; workspaceFiles: { path: string }[] } }[];
    expect(res).toHaveLength(logs.length);
    const seen = new Set<string>();
    for (let i = 0; i < logs.length; i++) {
      const msgs = res[i]!.messages ?? [];
      msgs.forEach((m) => seen.add(m.event));
      const seed = seedReduce(msgs);
      const go = res[i]!.state;
      const ts = reduceAll(logs[i]!);
      const what = `log seed ${1000 + i}`;
      // Exactly what GET /api/sessions/{id} serves (Go's JSON), nulls aside.
      expect(dropNull(times(seed.main)), what).toEqual(dropNull(times(go.blocks)));
      expect([...seed.subs.keys()], what).toEqual(go.subagents.map((s) => s.id));
      for (const s of go.subagents) expect(dropNull(times(seed.subs.get(s.id)!)), `${what} ${s.id}`).toEqual(dropNull(times(s.blocks)));
      expect([...seed.files.keys()].sort(), what).toEqual(go.workspaceFiles.map((f) => f.path));
      // And what this package's reducer builds (empty and null values aside, as in parity.test.ts).
      expect(normalize(dropNull(seed.main)), what).toEqual(normalize(dropNull(ts.blocks)));
      expect(normalize(dropNull([...seed.subs.values()])), what).toEqual(normalize(dropNull(ts.subagents.map((s) => s.blocks))));
    }
    for (const e of ["session:block:start", "session:block:delta", "session:block:update", "session:block:complete", "session:subagent:discovered", "session:file:created", "session:file:deleted", "session:event"]) {
      expect(seen.has(e), e).toBe(true);
    }
  });
});
