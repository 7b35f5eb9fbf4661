import type { AgentEvent, EventType, PayloadMap } from "../src/index.js";

let clock = Date.parse("2026-11-21T23:47:49.108Z");

/** An envelope with a given seq, type and payload, in conversation conv. */
export function ev<T extends EventType>(seq: number, type: T, payload: PayloadMap[T], conv = "main", sessionId = "s1"): AgentEvent {
  clock += 1000;
  return {
    seq,
    type,
    payload,
    context: { sessionId, conversationId: conv, source: "runner", timestamp: new Date(clock).toISOString(), actor: null },
  } as AgentEvent;
}
