// Paging back: a state loaded from the last page of a conversation, then
// followed live, gets older pages put before its blocks and ends up as the
// state of the whole log.
import { describe, expect, it } from "vitest";
import { Conversation, noticesOf, prependPage, reduceAll, stateFromSnapshot, type AgentEvent, type ConversationState } from "../src/index.js";
import { ev } from "./helpers.js";

/** A log of n turns: a user message and an answer each; odd turns fail. */
function turnsLog(n: number, firstSeq = 1, firstTurn = 0): AgentEvent[] {
  const out: AgentEvent[] = [];
  let seq = firstSeq;
  for (let t = firstTurn; t < firstTurn + n; t++) {
    const q = `q${t}`;
    out.push(ev(seq++, "block:upsert", { block: { id: `${q}-user`, type: "user_message", content: `echo ${t}` } }));
    out.push(ev(seq++, "query:started", { queryId: q }));
    out.push(ev(seq++, "block:upsert", { block: { id: `${q}-out`, type: "assistant_text", content: `${t}` } }));
    if (t % 2 === 1) out.push(ev(seq++, "query:failed", { queryId: q, error: `boom ${t}`, code: "MODEL_ERROR" }));
    else out.push(ev(seq++, "query:completed", { queryId: q, result: `${t}` }));
  }
  return out;
}

/** What GET /api/sessions/{id}?before&limit returns for a state: blocks [from, to). */
function page(full: ConversationState, from: number, to: number) {
  const { errorNotices: _n, ...go } = JSON.parse(JSON.stringify(full)) as ConversationState;
  return { ...go, blocks: go.blocks.slice(from, to), blockOffset: from, totalBlocks: go.blocks.length, hasMore: from > 0 };
}

describe("prependPage", () => {
  it("pages back to the state of the whole log, turns placed where they ended", () => {
    const log = turnsLog(5); // 10 blocks
    const full = reduceAll(log);
    let st = stateFromSnapshot(page(full, 6, 10));
    expect(st.blockOffset).toBe(6);
    // Live events after the snapshot: a sixth turn, and an error event.
    const live = [...turnsLog(1, full.lastSeq + 1, 5), ev(full.lastSeq + 5, "error", { message: "late", code: "X" })];
    st = reduceAll(live, st);
    const want = reduceAll(live, full);

    let r = prependPage(st, page(full, 2, 6));
    expect(r.inserted).toBe(4);
    expect(r.state.blockOffset).toBe(2);
    expect(r.state.blocks.map((b) => b.id)).toEqual(want.blocks.slice(2).map((b) => b.id));
    r = prependPage(r.state, page(full, 0, 2));
    expect(r.inserted).toBe(2);
    const got = r.state;
    expect(got.blockOffset).toBeUndefined();
    expect(got.blocks).toEqual(want.blocks);
    expect(got.turns).toEqual(want.turns);
    expect(got.errorNotices).toEqual(want.errorNotices);
    expect(noticesOf(got)).toEqual(noticesOf(want));
    // Everything else is the live state's.
    expect(got.lastSeq).toBe(st.lastSeq);
    expect(got.usage).toBe(st.usage);
  });

  it("skips blocks it holds and leaves the state alone when nothing is new", () => {
    const full = reduceAll(turnsLog(3)); // 6 blocks
    const st = stateFromSnapshot(page(full, 3, 6));
    const overlap = prependPage(st, page(full, 1, 5));
    expect(overlap.inserted).toBe(2);
    expect(overlap.state.blocks.map((b) => b.id)).toEqual(full.blocks.slice(1).map((b) => b.id));
    expect(new Set(overlap.state.blocks.map((b) => b.id)).size).toBe(overlap.state.blocks.length);
    const same = prependPage(st, { blocks: st.blocks.slice(0, 1), blockOffset: 3 });
    expect(same.inserted).toBe(0);
    expect(same.state).toBe(st);
  });

  it("keeps a turn that ran before any block, and a running one, as they were", () => {
    const log: AgentEvent[] = [
      ev(1, "query:started", { queryId: "q0" }),
      ev(2, "query:failed", { queryId: "q0", error: "no start" }),
      ...turnsLog(2, 3, 1),
      ev(20, "query:started", { queryId: "q9" }),
    ];
    const full = reduceAll(log);
    const st = stateFromSnapshot(page(full, 2, 4));
    const got = prependPage(st, page(full, 0, 2)).state;
    expect(got.turns).toEqual(full.turns);
    expect(got.turns[0]!.afterBlock).toBeUndefined();
    expect(got.turns.at(-1)!.status).toBe("running");
  });
});

describe("Conversation.prependPage", () => {
  it("applies queued events first and notifies once", () => {
    const full = reduceAll(turnsLog(2)); // 4 blocks
    const ticks: (() => void)[] = [];
    const c = new Conversation({ initial: stateFromSnapshot(page(full, 2, 4)), schedule: (cb) => ticks.push(cb) });
    const states: ConversationState[] = [];
    c.subscribe((s) => states.push(s));
    c.push(ev(full.lastSeq + 1, "block:upsert", { block: { id: "late", type: "assistant_text", content: "x" } }));
    expect(c.prependPage(page(full, 0, 2))).toBe(2);
    expect(states).toHaveLength(2); // the flush, then the page
    expect(c.state.blocks.map((b) => b.id)).toEqual([...full.blocks.map((b) => b.id), "late"]);
    expect(c.state.blockOffset).toBeUndefined();
    expect(c.prependPage(page(full, 0, 2))).toBe(0);
    expect(states).toHaveLength(2);
  });
});
