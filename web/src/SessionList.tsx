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
    const load = () =>
      client
        .listSessions()
        .then((l) => {
          if (cancelled) return;
          setError(null);
          // Frames that arrived while the listing was in flight are newer: keep them.
          setSessions((cur) => mergeList(l, cur));
        })
        .catch((e: unknown) => {
          if (cancelled) return;
          if (e instanceof AgentdError && e.status === 401) unauthorized();
          setError(e instanceof Error ? e.message : String(e));
        });
    void load();
    const sub = socket.watchSessions({
      onJoined: () => void load(),
      onSession: (s) => setSessions((cur) => upsert(cur, s)),
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

export function mergeList(fresh: SessionSummary[], cur: SessionSummary[]): SessionSummary[] {
  const byId = new Map(cur.map((s) => [s.sessionId, s]));
  return sortList(fresh.map((s) => {
    const c = byId.get(s.sessionId);
    return c && !newer(s, c) ? { ...s, ...c } : s;
  }));
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
