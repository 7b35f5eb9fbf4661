import { useEffect, useState } from "react";
import { AgentdError, type SessionSummary } from "@agentd/client";
import { relTime, useApp, useNow } from "./app-context";

/** Keeps the session list live: a REST listing after each (re)join of "*" plus the list frames in between. */
export function useSessions(): { sessions: SessionSummary[]; error: string | null } {
  const { client, socket, unauthorized } = useApp();
  const [sessions, setSessions] = useState<SessionSummary[]>([]);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    let cancelled = false;
    // For each listing in flight, the sessions live frames touched meanwhile.
    const inFlight = new Set<Set<string>>();
    const load = () => {
      const touched = new Set<string>();
      inFlight.add(touched);
      return client
        .listSessions()
        .then((l) => {
          if (cancelled) return;
          setError(null);
          // Frames that arrived while the listing was in flight are newer: keep them.
          setSessions((cur) => mergeList(l, cur, touched));
        })
        .catch((e: unknown) => {
          if (cancelled) return;
          if (e instanceof AgentdError && e.status === 401) unauthorized();
          setError(e instanceof Error ? e.message : String(e));
        })
        .finally(() => inFlight.delete(touched));
    };
    void load();
    const sub = socket.watchSessions({
      onJoined: () => void load(),
      onSession: (s) => {
        for (const t of inFlight) t.add(s.sessionId);
        setSessions((cur) => upsert(cur, s));
      },
    });
    return () => {
      cancelled = true;
      sub.close();
    };
  }, [client, socket, unauthorized]);
  return { sessions, error };
}

function newer(a: SessionSummary, b: SessionSummary): boolean {
  return (a.lastActivity ?? "") >= (b.lastActivity ?? "");
}

export function upsert(list: SessionSummary[], s: SessionSummary & { deleted?: boolean }): SessionSummary[] {
  const i = list.findIndex((x) => x.sessionId === s.sessionId);
  if (s.deleted) return i < 0 ? list : list.filter((x) => x.sessionId !== s.sessionId);
  const next = list.slice();
  if (i >= 0) next[i] = { ...next[i]!, ...s };
  else next.push(s);
  return sortList(next);
}

/**
 * Merges a REST listing into the current list. touched holds the sessions
 * that live frames changed while the listing was in flight: for those the
 * current list is newer than the listing (a session created meanwhile is
 * kept, one deleted meanwhile stays deleted). Any other session the listing
 * lacks is gone.
 */
export function mergeList(fresh: SessionSummary[], cur: SessionSummary[], touched: ReadonlySet<string> = new Set()): SessionSummary[] {
  const byId = new Map(cur.map((s) => [s.sessionId, s]));
  const out: SessionSummary[] = [];
  for (const s of fresh) {
    const c = byId.get(s.sessionId);
    byId.delete(s.sessionId);
    if (touched.has(s.sessionId) && !c) continue; // deleted while the listing was in flight
    out.push(c && !newer(s, c) ? { ...s, ...c } : s);
  }
  for (const [id, c] of byId) if (touched.has(id)) out.push(c); // created while it was in flight
  return sortList(out);
}

function sortList(l: SessionSummary[]): SessionSummary[] {
  return l.sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0));
}

export function SessionList({ selected, onSelect, onNew }: { selected: string | null; onSelect: (id: string) => void; onNew: () => void }) {
  const { sessions, error } = useSessions();
  const now = useNow(15_000);
  return (
    <aside className="sidebar" aria-label="Sessions">
      <div className="sidebar-head">
        <h2>Sessions</h2>
        <button type="button" className="primary" data-testid="new-session-button" onClick={onNew}>
          + New
        </button>
      </div>
      {error && (
        <div className="error-box small" role="alert">
          {error}
        </div>
      )}
      <ul className="session-list" data-testid="session-list">
        {sessions.length === 0 && !error && <li className="muted small pad">No sessions yet.</li>}
        {sessions.map((s) => (
          <li key={s.sessionId}>
            <button
              type="button"
              className={`session-item${selected === s.sessionId ? " selected" : ""}`}
              data-testid="session-item"
              data-session-id={s.sessionId}
              aria-current={selected === s.sessionId ? "page" : undefined}
              onClick={() => onSelect(s.sessionId)}
            >
              <span className="row">
                <span className="name">{s.name || s.sessionId.slice(0, 8)}</span>
                <span className={`status status-${s.status}`} data-testid="session-item-status">
                  {s.status}
                </span>
              </span>
              <span className="row muted small">
                <span>{s.type}</span>
                <span title={s.lastActivity}>{relTime(s.lastActivity, now)}</span>
              </span>
            </button>
          </li>
        ))}
      </ul>
    </aside>
  );
}
