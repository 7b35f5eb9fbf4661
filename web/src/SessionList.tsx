import { useEffect, useMemo, useRef, useState } from "react";
import { AgentdError, type SessionSummary } from "@agentd/client";
import { relTime, useApp, useNow } from "./app-context";
import { Dialog } from "./Dialog";

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

/**
 * Short ids that tell the sessions apart: the end of each id (UUIDv7 ids
 * begin with their creation time, so sessions created close together share
 * their first characters), as long as it takes to be unique, 6 at least.
 */
export function shortIds(ids: readonly string[]): Map<string, string> {
  const out = new Map<string, string>();
  const clean = ids.map((id) => id.replace(/-/g, ""));
  for (let len = 6; len <= 32; len += 2) {
    const seen = new Map<string, number>();
    for (const c of clean) {
      const k = c.slice(-len);
      seen.set(k, (seen.get(k) ?? 0) + 1);
    }
    ids.forEach((id, i) => {
      if (out.has(id)) return;
      const k = clean[i]!.slice(-len);
      if (seen.get(k) === 1 || len >= clean[i]!.length) out.set(id, k);
    });
    if (out.size === ids.length) break;
  }
  return out;
}

/** What a status means to the user: can the session be continued? */
export function statusLabel(status: string, agentAvailable: boolean): { label: string; title: string; kind: string } {
  if (!agentAvailable) return { label: "ended", title: "Its agent CLI is not installed on this server: it cannot be continued here.", kind: "ended" };
  switch (status) {
    case "running":
      return { label: "working", title: "A turn is running.", kind: "running" };
    case "starting":
      return { label: "starting", title: "Its environment is starting.", kind: "running" };
    case "idle":
    case "ready":
      return { label: "ready", title: "Waiting for a message.", kind: "ready" };
    case "created":
      return { label: "new", title: "No message yet.", kind: "ready" };
    case "terminated":
      return { label: "paused", title: "Its environment was stopped (idle or deleted); send a message to continue: it starts again with the same workspace.", kind: "paused" };
    case "error":
      return { label: "error", title: "Its environment failed; send a message to try again.", kind: "error" };
  }
  return { label: status || "…", title: "", kind: "" };
}

export function SessionList({
  sessions,
  error,
  selected,
  onSelect,
  onNew,
  unavailable,
}: {
  sessions: SessionSummary[];
  error: string | null;
  selected: string | null;
  onSelect: (id: string | null) => void;
  onNew: () => void;
  /** Architectures whose CLI is missing on the server. */
  unavailable: ReadonlySet<string>;
}) {
  const now = useNow(15_000);
  const [query, setQuery] = useState("");
  const [editing, setEditing] = useState<string | null>(null);
  const [deleting, setDeleting] = useState<SessionSummary | null>(null);
  const short = useMemo(() => shortIds(sessions.map((s) => s.sessionId)), [sessions]);
  const q = query.trim().toLowerCase();
  const shown = q
    ? sessions.filter((s) => [s.name, s.sessionId, s.type, s.status, statusLabel(s.status, !unavailable.has(s.type)).label].some((x) => x?.toLowerCase().includes(q)))
    : sessions;
  return (
    <aside className="sidebar" aria-label="Sessions">
      <div className="sidebar-head">
        <h2>Sessions</h2>
        <button type="button" className="primary" data-testid="new-session-button" onClick={onNew}>
          + New
        </button>
      </div>
      <div className="sidebar-search">
        <input
          type="search"
          data-testid="session-search"
          aria-label="Search sessions"
          placeholder="Search by name, id, agent, status"
          value={query}
          onChange={(e) => setQuery(e.target.value)}
        />
      </div>
      {error && (
        <div className="error-box small" role="alert">
          {error}
        </div>
      )}
      <ul className="session-list" data-testid="session-list">
        {sessions.length === 0 && !error && <li className="muted small pad">No sessions yet.</li>}
        {sessions.length > 0 && shown.length === 0 && <li className="muted small pad">No session matches “{query}”.</li>}
        {shown.map((s) => {
          const st = statusLabel(s.status, !unavailable.has(s.type));
          return (
            <li key={s.sessionId} className={`session-row${selected === s.sessionId ? " selected" : ""}`}>
              {editing === s.sessionId ? (
                <RenameForm session={s} onDone={() => setEditing(null)} />
              ) : (
                <button
                  type="button"
                  className="session-item"
                  data-testid="session-item"
                  data-session-id={s.sessionId}
                  aria-current={selected === s.sessionId ? "page" : undefined}
                  onClick={() => onSelect(s.sessionId)}
                >
                  <span className="row">
                    <span className="name">{s.name || "Untitled"}</span>
                    <span className={`status status-${st.kind}`} data-testid="session-item-status" data-status={s.status} title={st.title}>
                      {st.label}
                    </span>
                  </span>
                  <span className="row muted small">
                    <span>
                      {s.type} · <span className="mono" data-testid="session-short-id" title={s.sessionId}>
                        {short.get(s.sessionId)}
                      </span>
                    </span>
                    <span title={s.lastActivity}>{relTime(s.lastActivity, now)}</span>
                  </span>
                </button>
              )}
              {editing !== s.sessionId && (
                <div className="session-actions">
                  <button type="button" className="icon" data-testid="rename-session" aria-label={`Rename ${s.name || short.get(s.sessionId)}`} title="Rename" onClick={() => setEditing(s.sessionId)}>
                    ✎
                  </button>
                  <button type="button" className="icon" data-testid="delete-session" aria-label={`Delete ${s.name || short.get(s.sessionId)}`} title="Delete" onClick={() => setDeleting(s)}>
                    🗑
                  </button>
                </div>
              )}
            </li>
          );
        })}
      </ul>
      {deleting && (
        <DeleteDialog
          session={deleting}
          onClose={(deleted) => {
            setDeleting(null);
            if (deleted && selected === deleted) onSelect(null);
          }}
        />
      )}
    </aside>
  );
}

function RenameForm({ session, onDone }: { session: SessionSummary; onDone: () => void }) {
  const { client } = useApp();
  const [name, setName] = useState(session.name);
  const [err, setErr] = useState<string | null>(null);
  const ref = useRef<HTMLInputElement>(null);
  useEffect(() => {
    ref.current?.focus();
    ref.current?.select();
  }, []);
  return (
    <form
      className="rename-form"
      onSubmit={(e) => {
        e.preventDefault();
        client
          .renameSession(session.sessionId, name.trim())
          .then(onDone)
          .catch((x: unknown) => setErr(x instanceof Error ? x.message : String(x)));
      }}
    >
      <input
        ref={ref}
        aria-label="New name"
        data-testid="rename-input"
        value={name}
        maxLength={200}
        onChange={(e) => setName(e.target.value)}
        onKeyDown={(e) => {
          if (e.key === "Escape") {
            e.preventDefault();
            onDone();
          }
        }}
      />
      <button type="submit" className="primary small-btn" data-testid="rename-save">
        Save
      </button>
      {err && (
        <div className="error-box small" role="alert">
          {err}
        </div>
      )}
    </form>
  );
}

function DeleteDialog({ session, onClose }: { session: SessionSummary; onClose: (deleted?: string) => void }) {
  const { client } = useApp();
  const [purge, setPurge] = useState(true);
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState<string | null>(null);
  return (
    <Dialog title="Delete session" onClose={() => onClose()} testId="delete-dialog">
      <p>
        Delete <strong>{session.name || session.sessionId}</strong>? Its environment is stopped.
      </p>
      <label className="check">
        <input type="checkbox" checked={purge} onChange={(e) => setPurge(e.target.checked)} data-testid="delete-purge" /> Also delete its history and workspace files
      </label>
      {err && (
        <div className="error-box small" role="alert">
          {err}
        </div>
      )}
      <div className="modal-actions">
        <button type="button" onClick={() => onClose()}>
          Cancel
        </button>
        <button
          type="button"
          className="danger"
          data-testid="delete-confirm"
          disabled={busy}
          onClick={() => {
            setBusy(true);
            client
              .deleteSession(session.sessionId, { purge })
              .then(() => onClose(session.sessionId))
              .catch((x: unknown) => {
                setErr(x instanceof Error ? x.message : String(x));
                setBusy(false);
              });
          }}
        >
          Delete
        </button>
      </div>
    </Dialog>
  );
}
