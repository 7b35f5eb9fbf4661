// "Show earlier messages": a conversation loaded as its last page pages back.
import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import { Conversation, reduceAll, stateFromSnapshot, type AgentEvent, type ConversationState, type SessionState } from "@agentd/client";
import { AppContext } from "../src/app-context";
import { EARLIER_PAGE, EarlierMessages, loadEarlier, type PageSource } from "../src/SessionView";

function log(turns: number): AgentEvent[] {
  const out: AgentEvent[] = [];
  let seq = 1;
  for (let t = 0; t < turns; t++) {
    const ctx = { sessionId: "s", conversationId: "main", source: "runner", timestamp: "2026-11-26T01:00:00Z", actor: null };
    out.push({ seq: seq++, type: "block:upsert", payload: { block: { id: `u${t}`, type: "user_message", content: `echo ${t}` } }, context: ctx } as AgentEvent);
    out.push({ seq: seq++, type: "query:started", payload: { queryId: `q${t}` }, context: ctx } as AgentEvent);
    out.push({ seq: seq++, type: "block:upsert", payload: { block: { id: `a${t}`, type: "assistant_text", content: `${t}` } }, context: ctx } as AgentEvent);
    out.push({ seq: seq++, type: "query:completed", payload: { queryId: `q${t}` }, context: ctx } as AgentEvent);
  }
  return out;
}

/** A fake server holding a whole state, answering getSession as the real one pages. */
function server(full: ConversationState, pageSize: number) {
  const calls: { limit?: number | undefined; before?: string | undefined }[] = [];
  let fail: Error | null = null;
  const src: PageSource = {
    async getSession(_id, opts) {
      calls.push(opts);
      if (fail) throw fail;
      const end = opts.before === undefined ? full.blocks.length : full.blocks.findIndex((b) => b.id === opts.before);
      const from = Math.max(0, end - Math.min(opts.limit ?? pageSize, pageSize));
      const { errorNotices: _n, blockOffset: _o, ...rest } = JSON.parse(JSON.stringify(full)) as ConversationState;
      return { ...rest, blocks: rest.blocks.slice(from, end), blockOffset: from, totalBlocks: full.blocks.length, hasMore: from > 0 } as unknown as SessionState;
    },
  };
  return { src, calls, failWith: (e: Error | null) => (fail = e) };
}

const app = { client: {} as never, socket: {} as never, unauthorized: () => {} };
const render = (conv: Conversation) =>
  renderToStaticMarkup(
    <AppContext.Provider value={app}>
      <EarlierMessages sessionId="s" conv={conv} state={conv.state} />
    </AppContext.Provider>,
  );

describe("Show earlier messages", () => {
  it("pages back to the first block, one page a click, and then shows nothing", async () => {
    const full = reduceAll(log(5)); // 10 blocks
    const srv = server(full, 4);
    const conv = new Conversation({ initial: stateFromSnapshot(await srv.src.getSession("s", {})) });
    expect(conv.state.blocks.map((b) => b.id)).toEqual(["u3", "a3", "u4", "a4"]);
    expect(render(conv)).toContain("Show earlier messages (6 more)");
    expect(await loadEarlier(srv.src, "s", conv)).toBe(4);
    expect(srv.calls.at(-1)).toEqual({ before: "u3", limit: EARLIER_PAGE });
    expect(render(conv)).toContain("Show earlier messages (2 more)");
    expect(await loadEarlier(srv.src, "s", conv)).toBe(2);
    expect(render(conv)).toBe("");
    expect(conv.state.blocks).toEqual(full.blocks);
    expect(conv.state.turns).toEqual(full.turns);
    // Nothing more to load: no request.
    const n = srv.calls.length;
    expect(await loadEarlier(srv.src, "s", conv)).toBe(0);
    expect(srv.calls).toHaveLength(n);
  });

  it("rejects on a failed request and keeps the state", async () => {
    const full = reduceAll(log(3));
    const srv = server(full, 2);
    const conv = new Conversation({ initial: stateFromSnapshot(await srv.src.getSession("s", {})) });
    const before = conv.state;
    srv.failWith(new Error("HTTP 500"));
    await expect(loadEarlier(srv.src, "s", conv)).rejects.toThrow("HTTP 500");
    expect(conv.state).toBe(before);
  });
});
