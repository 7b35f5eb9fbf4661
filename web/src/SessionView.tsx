import { useCallback, useEffect, useMemo, useRef, useState, useSyncExternalStore, lazy, Suspense } from "react";
import {
  AgentdError,
  Conversation,
  noticesOf,
  stateFromSnapshot,
  type ConversationState,
  type PermissionRequestedPayload,
  type SessionState,
} from "@agentd/client";
import { buildItems, ItemView, type Item } from "./blocks";
import { frameScheduler, stats, useApp, useNow } from "./app-context";
import { VirtualList } from "./VirtualList";
import { Workspace } from "./Workspace";

const TerminalTab = lazy(() => import("./Terminal"));

type Tab = "conversation" | "workspace" | "terminal";

interface Loaded {
  conv: Conversation;
  meta: SessionState;
}

/** A session: its live conversation, workspace and terminal. */
export function SessionView({ id, onBack }: { id: string; onBack: () => void }) {
  const { client, socket, unauthorized } = useApp();
  const [loaded, setLoaded] = useState<Loaded | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [tab, setTab] = useState<Tab>("conversation");
  const [terminalOpened, setTerminalOpened] = useState(false);

  useEffect(() => {
    let cancelled = false;
    let sub: { close(): void } | null = null;
    setLoaded(null);
    setError(null);
    setTab("conversation");
    setTerminalOpened(false);
    client
      .getSession(id)
      .then((snap) => {
        if (cancelled) return;
        const conv = new Conversation({
          initial: stateFromSnapshot(snap),
          schedule: frameScheduler,
          onError: (m) => console.warn("agentd: event not applied:", m),
        });
        conv.subscribe(() => stats.commits++);
        // Resume exactly after the snapshot: the server replays what came since.
        sub = socket.subscribe(id, {
          after: snap.lastSeq,
          onEvent: (e) => {
            stats.events++;
            if (e.type === "block:delta") stats.deltas++;
            conv.push(e);
          },
          onError: (err) => setError(`${err.error} (${err.code})`),
        });
        if (window.__agentd) window.__agentd.conversation = conv;
        setLoaded({ conv, meta: snap });
      })
      .catch((e: unknown) => {
        if (cancelled) return;
        if (e instanceof AgentdError && e.status === 401) unauthorized();
        setError(e instanceof Error ? e.message : String(e));
      });
    return () => {
      cancelled = true;
      sub?.close();
      if (window.__agentd) window.__agentd.conversation = null;
    };
  }, [id, client, socket, unauthorized]);

  if (error && !loaded)
    return (
      <div className="session-view">
        <div className="error-box" role="alert">
          {error}
        </div>
      </div>
    );
  if (!loaded) return <div className="session-view loading">Loading…</div>;
  return (
    <Live
      key={id}
      id={id}
      loaded={loaded}
      tab={tab}
      setTab={(t) => {
        if (t === "terminal") setTerminalOpened(true);
        setTab(t);
      }}
      terminalOpened={terminalOpened}
      onBack={onBack}
      error={error}
    />
  );
}

function Live({
  id,
  loaded,
  tab,
  setTab,
  terminalOpened,
  onBack,
  error,
}: {
  id: string;
  loaded: Loaded;
  tab: Tab;
  setTab: (t: Tab) => void;
  terminalOpened: boolean;
  onBack: () => void;
  error: string | null;
}) {
  const { conv, meta } = loaded;
  const state = useSyncExternalStore(
    useCallback((cb) => conv.subscribe(cb), [conv]),
    () => conv.state,
  );
  const running = !!state.activeQueryId || state.status === "running";
  return (
    <div className="session-view" data-testid="session-view" data-session-id={id}>
      <header className="session-head">
        <button type="button" className="back" onClick={onBack} aria-label="Back to sessions">
          ←
        </button>
        <div className="session-title">
          <div className="name">{meta.name || id.slice(0, 8)}</div>
          <div className="muted small">
            {meta.type} · <span data-testid="session-status" className={`status status-${state.status}`}>{state.status || "…"}</span>
            {state.model ? ` · ${state.model}` : ""}
          </div>
        </div>
        <Usage state={state} />
      </header>
      <nav className="tabs" role="tablist" aria-label="Session views">
        {(["conversation", "workspace", "terminal"] as const).map((t) => (
          <button
            key={t}
            type="button"
            role="tab"
            aria-selected={tab === t}
            data-testid={`tab-${t}`}
            className={tab === t ? "active" : ""}
            onClick={() => setTab(t)}
          >
            {t === "conversation" ? "Conversation" : t === "workspace" ? state.workspaceFiles.length ? `Files (${state.workspaceFiles.length})` : "Files" : "Terminal"}
          </button>
        ))}
      </nav>
      {error && (
        <div className="error-box" role="alert">
          {error}
        </div>
      )}
      {state.status === "error" && state.runtime.lastError && (
        <div className="error-box small" role="alert" data-testid="session-error">
          Session error: {state.runtime.lastError}
        </div>
      )}
      <div className="tab-body" hidden={tab !== "conversation"} role="tabpanel">
        <ConversationPane state={state} />
        <Permissions sessionId={id} pending={state.pendingPermissions} />
        <Composer sessionId={id} running={running} />
      </div>
      {tab === "workspace" && (
        <div className="tab-body" role="tabpanel">
          <Workspace sessionId={id} files={state.workspaceFiles} />
        </div>
      )}
      {terminalOpened && (
        <div className="tab-body" hidden={tab !== "terminal"} role="tabpanel">
          <Suspense fallback={<div className="muted">Loading terminal…</div>}>
            <TerminalTab sessionId={id} visible={tab === "terminal"} />
          </Suspense>
        </div>
      )}
    </div>
  );
}

function Usage({ state }: { state: ConversationState }) {
  const u = state.usage;
  if (!u.inputTokens && !u.outputTokens && !state.costUSD) return null;
  return (
    <div className="usage small" data-testid="usage" title="Tokens in / out, and cost">
      <span>{fmtTokens(u.inputTokens)} in</span> · <span>{fmtTokens(u.outputTokens)} out</span>
      {state.costUSD ? <span> · ${state.costUSD.toFixed(4)}</span> : null}
    </div>
  );
}

function fmtTokens(n: number): string {
  return n >= 10_000 ? `${(n / 1000).toFixed(1)}k` : String(n);
}

const itemKey = (it: Item) => it.key;
const estimateItem = (it: Item) => (it.kind === "tool" ? 120 : 56);
const renderItem = (it: Item) => <ItemView item={it} />;

function ConversationPane({ state }: { state: ConversationState }) {
  // Turn notices come from the reduced turns, which the snapshot carries: a
  // failed or interrupted turn keeps its notice across a reload, once.
  const notices = useMemo(() => noticesOf(state), [state.turns, state.errorNotices]);
  const items = useMemo(() => {
    const awaiting = new Set<string>();
    for (const p of state.pendingPermissions) if (p.toolUseId) awaiting.add(p.toolUseId);
    return buildItems(state.blocks, notices, state.subagents, awaiting);
  }, [state.blocks, notices, state.subagents, state.pendingPermissions]);
  const running = !!state.activeQueryId;
  return (
    <VirtualList
      className="conversation"
      testId="conversation"
      label="Conversation"
      items={items}
      itemKey={itemKey}
      estimate={estimateItem}
      renderItem={renderItem}
      footer={
        items.length === 0 ? (
          <div className="empty muted">No messages yet. Send one below.</div>
        ) : running ? (
          <div className="working muted small" data-testid="turn-running">
            Working…
          </div>
        ) : null
      }
    />
  );
}

function Permissions({ sessionId, pending }: { sessionId: string; pending: readonly PermissionRequestedPayload[] }) {
  if (pending.length === 0) return null;
  return (
    <div className="permissions" aria-label="Permission requests">
      {pending.map((p) => (
        <PermissionCard key={p.requestId} sessionId={sessionId} req={p} />
      ))}
    </div>
  );
}

function PermissionCard({ sessionId, req }: { sessionId: string; req: PermissionRequestedPayload }) {
  const { client } = useApp();
  const now = useNow(1000);
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState<string | null>(null);
  const left = Math.max(0, Math.ceil((Date.parse(req.expiresAt) - now) / 1000));
  const answer = async (behavior: "allow" | "deny") => {
    setBusy(true);
    setErr(null);
    try {
      await client.answerPermission(sessionId, req.requestId, { behavior });
    } catch (e) {
      setErr(e instanceof Error ? e.message : String(e));
      setBusy(false);
    }
  };
  const input = req.input && typeof req.input === "object" && !Array.isArray(req.input) ? (req.input as Record<string, unknown>) : null;
  const summary = typeof input?.command === "string" ? `$ ${input.command}` : JSON.stringify(req.input, null, 2);
  return (
    <div className="permission" role="alertdialog" aria-label={`Permission for ${req.toolName}`} data-testid="permission-request" data-request-id={req.requestId}>
      <div className="perm-head">
        <strong>{req.toolName}</strong> wants to run
        <span className="countdown" data-testid="permission-countdown" aria-live="polite">
          {Number.isNaN(left) ? "" : left > 0 ? `${Math.floor(left / 60)}:${String(left % 60).padStart(2, "0")} left` : "expired"}
        </span>
      </div>
      <pre className="perm-input">{summary}</pre>
      {err && (
        <div className="error-box small" role="alert">
          {err}
        </div>
      )}
      <div className="perm-actions">
        <button type="button" className="primary" data-testid="permission-allow" disabled={busy || left === 0} onClick={() => void answer("allow")}>
          Allow
        </button>
        <button type="button" data-testid="permission-deny" disabled={busy || left === 0} onClick={() => void answer("deny")}>
          Deny
        </button>
      </div>
    </div>
  );
}

function Composer({ sessionId, running }: { sessionId: string; running: boolean }) {
  const { client } = useApp();
  const [text, setText] = useState("");
  const [sending, setSending] = useState(false);
  const [err, setErr] = useState<string | null>(null);
  const ref = useRef<HTMLTextAreaElement>(null);
  const send = async () => {
    const content = text.trim();
    if (!content || sending) return;
    setSending(true);
    setErr(null);
    try {
      await client.sendMessage(sessionId, content);
      setText("");
    } catch (e) {
      setErr(e instanceof AgentdError && e.code === "SESSION_BUSY" ? "A turn is still running; wait or interrupt it." : e instanceof Error ? e.message : String(e));
    } finally {
      setSending(false);
      ref.current?.focus();
    }
  };
  const interrupt = async () => {
    setErr(null);
    try {
      await client.interrupt(sessionId);
    } catch (e) {
      setErr(e instanceof Error ? e.message : String(e));
    }
  };
  return (
    <form
      className="composer"
      onSubmit={(e) => {
        e.preventDefault();
        void send();
      }}
    >
      {err && (
        <div className="error-box small" role="alert">
          {err}
        </div>
      )}
      <div className="composer-row">
        <textarea
          ref={ref}
          data-testid="composer-input"
          aria-label="Message"
          placeholder={running ? "A turn is running…" : "Message (Enter to send, Shift+Enter for a new line)"}
          value={text}
          rows={2}
          onChange={(e) => setText(e.target.value)}
          onKeyDown={(e) => {
            if (e.key === "Enter" && !e.shiftKey && !e.nativeEvent.isComposing) {
              e.preventDefault();
              void send();
            }
          }}
        />
        {running ? (
          <button type="button" className="danger" data-testid="interrupt-button" onClick={() => void interrupt()}>
            Stop
          </button>
        ) : null}
        <button type="submit" className="primary" data-testid="send-button" disabled={sending || !text.trim() || running}>
          Send
        </button>
      </div>
    </form>
  );
}
