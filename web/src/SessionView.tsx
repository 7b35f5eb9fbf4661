import { useCallback, useEffect, useMemo, useRef, useState, useSyncExternalStore, lazy, Suspense, type KeyboardEvent as ReactKeyboardEvent } from "react";
import {
  AgentdError,
  Conversation,
  noticesOf,
  stateFromSnapshot,
  type AnyBlock,
  type ContentPart,
  type ConversationState,
  type PermissionRequestedPayload,
  type QueuedMessage,
  type SessionState,
  type SessionSummary,
  type Usage,
} from "@agentd/client";
import { buildItems, inputSummary, ItemView, mergeTurnErrors, SessionInfoContext, ToolInput, type Item, type SessionInfo } from "./blocks";
import { frameScheduler, stats, useApp, useNow } from "./app-context";
import { VirtualList } from "./VirtualList";
import { Workspace } from "./Workspace";
import { Changes } from "./Changes";
import { ErrorBoundary } from "./ErrorBoundary";
import { editsOf } from "./diff";
import { stripAnsi } from "./lib/ansi";

const TerminalTab = lazy(() => import("./Terminal"));

type Tab = "conversation" | "changes" | "workspace" | "terminal";
const TABS: readonly Tab[] = ["conversation", "changes", "workspace", "terminal"];

interface Loaded {
  conv: Conversation;
  meta: SessionState;
}

/** A session: its live conversation, changes, workspace and terminal. */
export function SessionView({ id, onBack, summary }: { id: string; onBack: () => void; summary?: SessionSummary | undefined }) {
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
      name={summary?.name ?? loaded.meta.name}
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

const TAB_LABEL: Record<Tab, string> = { conversation: "Conversation", changes: "Changes", workspace: "Files", terminal: "Terminal" };

function Live({
  id,
  loaded,
  name,
  tab,
  setTab,
  terminalOpened,
  onBack,
  error,
}: {
  id: string;
  loaded: Loaded;
  name: string;
  tab: Tab;
  setTab: (t: Tab) => void;
  terminalOpened: boolean;
  onBack: () => void;
  error: string | null;
}) {
  const { client } = useApp();
  const { conv, meta } = loaded;
  const state = useSyncExternalStore(
    useCallback((cb) => conv.subscribe(cb), [conv]),
    () => conv.state,
  );
  const running = !!state.activeQueryId || state.status === "running";
  const tabRefs = useRef<Record<string, HTMLButtonElement | null>>({});
  const composerRef = useRef<HTMLTextAreaElement>(null);
  const [sendErr, setSendErr] = useState<string | null>(null);

  const resend = useCallback(
    (content: string) => {
      setSendErr(null);
      client.sendMessage(id, content).catch((e: unknown) => setSendErr(e instanceof Error ? e.message : String(e)));
    },
    [client, id],
  );
  const info = useMemo<SessionInfo>(() => ({ sessionId: id, workDir: state.runtime.workDir, resend }), [id, state.runtime.workDir, resend]);

  const interrupt = useCallback(() => {
    client.interrupt(id).catch((e: unknown) => {
      if (!(e instanceof AgentdError && e.code === "NO_ACTIVE_TURN")) setSendErr(e instanceof Error ? e.message : String(e));
    });
  }, [client, id]);

  // Esc interrupts the running turn, as in Claude Code (unless a dialog or
  // menu has it).
  useEffect(() => {
    if (!running) return;
    const onKey = (e: KeyboardEvent) => {
      if (e.key !== "Escape" || e.defaultPrevented) return;
      if ((e.target as HTMLElement | null)?.closest?.("[role=dialog],[role=menu]")) return;
      e.preventDefault();
      interrupt();
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, [running, interrupt]);

  const onTabKey = (e: ReactKeyboardEvent, t: Tab) => {
    const i = TABS.indexOf(t);
    let next: Tab | undefined;
    if (e.key === "ArrowRight") next = TABS[(i + 1) % TABS.length];
    else if (e.key === "ArrowLeft") next = TABS[(i + TABS.length - 1) % TABS.length];
    else if (e.key === "Home") next = TABS[0];
    else if (e.key === "End") next = TABS[TABS.length - 1];
    if (!next) return;
    e.preventDefault();
    setTab(next);
    tabRefs.current[next]?.focus();
  };

  return (
    <SessionInfoContext.Provider value={info}>
      <div className="session-view" data-testid="session-view" data-session-id={id}>
        <header className="session-head">
          <button type="button" className="back" onClick={onBack} aria-label="Back to sessions">
            ←
          </button>
          <div className="session-title">
            <h1 className="name" title={name || id}>
              {name || "Untitled session"}
            </h1>
            <div className="muted small">
              {meta.type} · <span data-testid="session-status" className={`status status-${state.status}`}>{state.status || "…"}</span>
              {state.model ? ` · ${state.model}` : ""}
            </div>
          </div>
          <UsageView usage={state.usage} cost={state.costUSD} />
        </header>
        <div className="tabs" role="tablist" aria-label="Session views">
          {TABS.map((t) => (
            <button
              key={t}
              ref={(el) => {
                tabRefs.current[t] = el;
              }}
              type="button"
              role="tab"
              id={`tab-${t}`}
              aria-selected={tab === t}
              aria-controls={`panel-${t}`}
              tabIndex={tab === t ? 0 : -1}
              data-testid={`tab-${t}`}
              className={tab === t ? "active" : ""}
              onClick={() => setTab(t)}
              onKeyDown={(e) => onTabKey(e, t)}
            >
              {t === "workspace" && state.workspaceFiles.length ? `Files (${state.workspaceFiles.length})` : TAB_LABEL[t]}
            </button>
          ))}
        </div>
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
        <div className="tab-body" hidden={tab !== "conversation"} role="tabpanel" id="panel-conversation" aria-labelledby="tab-conversation">
          <ErrorBoundary name="conversation" resetKey={id}>
            <ConversationPane state={state} header={<EarlierMessages sessionId={id} conv={conv} state={state} />} />
          </ErrorBoundary>
          <ErrorBoundary name="permission request" resetKey={state.pendingPermissions}>
            <Permissions sessionId={id} pending={state.pendingPermissions} onInterrupt={interrupt} composer={composerRef} />
          </ErrorBoundary>
          {running && <TurnProgress state={state} />}
          <QueuedMessages sessionId={id} queue={state.queuedMessages} />
          <Composer sessionId={id} running={running} onInterrupt={interrupt} inputRef={composerRef} externalError={sendErr} />
        </div>
        {tab === "changes" && (
          <div className="tab-body" role="tabpanel" id="panel-changes" aria-labelledby="tab-changes">
            <ErrorBoundary name="changes view" resetKey={id}>
              <Changes sessionId={id} turns={state.turns} running={running} blocks={state.blocks} />
            </ErrorBoundary>
          </div>
        )}
        {tab === "workspace" && (
          <div className="tab-body" role="tabpanel" id="panel-workspace" aria-labelledby="tab-workspace">
            <ErrorBoundary name="file browser" resetKey={id}>
              <Workspace sessionId={id} files={state.workspaceFiles} />
            </ErrorBoundary>
          </div>
        )}
        {terminalOpened && (
          <div className="tab-body" hidden={tab !== "terminal"} role="tabpanel" id="panel-terminal" aria-labelledby="tab-terminal">
            <ErrorBoundary name="terminal" resetKey={id}>
              <Suspense fallback={<div className="muted">Loading terminal…</div>}>
                <TerminalTab sessionId={id} visible={tab === "terminal"} />
              </Suspense>
            </ErrorBoundary>
          </div>
        )}
      </div>
    </SessionInfoContext.Provider>
  );
}

function UsageView({ usage, cost }: { usage: Usage; cost: number }) {
  if (!usage.inputTokens && !usage.outputTokens && !cost) return null;
  return (
    <div className="usage small" data-testid="usage" title="Tokens in / out, and cost">
      <span>{fmtTokens(usage.inputTokens)} in</span> · <span>{fmtTokens(usage.outputTokens)} out</span>
      {cost ? <span> · ${cost.toFixed(4)}</span> : null}
    </div>
  );
}

export function fmtTokens(n: number): string {
  return n >= 10_000 ? `${(n / 1000).toFixed(1)}k` : String(n);
}

function fmtElapsed(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
}

/** The tool call running now: the last tool_use without a result. */
export function runningTool(blocks: readonly AnyBlock[]): AnyBlock | undefined {
  const done = new Set<string>();
  for (let i = blocks.length - 1; i >= 0; i--) {
    const b = blocks[i]!;
    // A result still streaming (a command's output) is not the end of its call.
    if (b.type === "tool_result" && b.toolUseId && b.status !== "pending") done.add(b.toolUseId);
    if (b.type === "tool_use" && !done.has(b.toolUseId || b.id)) return b;
    if (b.type === "user_message") return undefined;
  }
  return undefined;
}

/** While a turn runs: how long, what it is doing, what it has cost so far. */
export function TurnProgress({ state }: { state: ConversationState }) {
  const now = useNow(1000);
  const info = useMemo(() => ({ sessionId: "", workDir: state.runtime.workDir }), [state.runtime.workDir]);
  const turn = state.turns.length ? state.turns[state.turns.length - 1] : undefined;
  const started = turn?.startedAt ? Date.parse(turn.startedAt) : NaN;
  const tool = runningTool(state.blocks);
  const u = turn?.usage;
  const what = tool ? `${tool.displayName || tool.toolName || "tool"}${toolArg(tool, info)}` : state.status === "starting" ? "Starting the environment" : "Thinking";
  return (
    <div className="turn-progress small" data-testid="turn-running" role="status" aria-live="off">
      <span className="spinner" aria-hidden="true" />
      <span className="what" data-testid="turn-activity">
        {what}…
      </span>
      {!Number.isNaN(started) && (
        <span className="muted" data-testid="turn-elapsed">
          {fmtElapsed(now - started)}
        </span>
      )}
      {u && (u.inputTokens || u.outputTokens) ? (
        <span className="muted" data-testid="turn-tokens" title="Tokens of this turn so far: in / out">
          ↑{fmtTokens(u.inputTokens)} ↓{fmtTokens(u.outputTokens)}
        </span>
      ) : null}
      {state.costUSD ? <span className="muted">${state.costUSD.toFixed(4)}</span> : null}
      <span className="muted hint">Esc to stop</span>
    </div>
  );
}

function toolArg(b: AnyBlock, info: { sessionId: string; workDir?: string | undefined }): string {
  const input = b.input;
  if (input && typeof input === "object" && !Array.isArray(input)) {
    const cmd = (input as Record<string, unknown>).command;
    if (typeof cmd === "string") return `: ${cmd.split("\n")[0]!.slice(0, 80)}`;
  }
  const s = inputSummary(input, info);
  return s ? `: ${s.slice(0, 80)}` : "";
}

const itemKey = (it: Item) => it.key;
const estimateItem = (it: Item) => (it.kind === "tool" ? 120 : 56);
const renderItem = (it: Item) => <ItemView item={it} />;

/** How many blocks "Show earlier messages" asks for: the server's default page. */
export const EARLIER_PAGE = 200;

/** The client calls loadEarlier makes. */
export interface PageSource {
  getSession(id: string, opts: { limit?: number; before?: string }): Promise<SessionState>;
}

/**
 * Fetches the page before the blocks conv holds and puts it before them.
 * Returns how many blocks it added; a failed request rejects (and changes
 * nothing).
 */
export async function loadEarlier(client: PageSource, sessionId: string, conv: Conversation): Promise<number> {
  const first = conv.state.blocks[0];
  if (!first || !conv.state.blockOffset) return 0;
  const page = await client.getSession(sessionId, { before: first.id, limit: EARLIER_PAGE });
  return conv.prependPage(page);
}

/**
 * "Show earlier messages (N more)" above a conversation loaded as its last
 * page; nothing once every block is held.
 */
export function EarlierMessages({ sessionId, conv, state }: { sessionId: string; conv: Conversation; state: ConversationState }) {
  const { client } = useApp();
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState<string | null>(null);
  const more = state.blockOffset ?? 0;
  if (more <= 0) return null;
  const load = () => {
    setBusy(true);
    setErr(null);
    loadEarlier(client, sessionId, conv)
      .catch((e: unknown) => setErr(`Could not load earlier messages: ${e instanceof Error ? e.message : String(e)}`))
      .finally(() => setBusy(false));
  };
  return (
    <div className="earlier">
      <button type="button" className="linkish" data-testid="show-earlier" disabled={busy} onClick={load}>
        {busy ? "Loading earlier messages…" : `Show earlier messages (${more} more)`}
      </button>
      {err && (
        <div className="error-box small" role="alert" data-testid="earlier-error">
          {err}
        </div>
      )}
    </div>
  );
}

function ConversationPane({ state, header }: { state: ConversationState; header?: React.ReactNode }) {
  // Turn notices come from the reduced turns, which the snapshot carries: a
  // failed or interrupted turn keeps its notice across a reload, once.
  const notices = useMemo(() => noticesOf(state), [state.turns, state.errorNotices]);
  const merged = useMemo(() => mergeTurnErrors(state.blocks, notices, state.turns), [state.blocks, notices, state.turns]);
  const items = useMemo(() => {
    const awaiting = new Set<string>();
    for (const p of state.pendingPermissions) if (p.toolUseId) awaiting.add(p.toolUseId);
    return buildItems(state.blocks, merged.notices, state.subagents, awaiting, merged.hidden);
  }, [state.blocks, merged, state.subagents, state.pendingPermissions]);
  return (
    <>
      <VirtualList
        id="conversation"
        className="conversation"
        testId="conversation"
        label="Conversation"
        items={items}
        itemKey={itemKey}
        estimate={estimateItem}
        renderItem={renderItem}
        header={header}
        footer={items.length === 0 ? <div className="empty muted">No messages yet. Send one below.</div> : null}
      />
      <Announcer state={state} />
    </>
  );
}

/**
 * A polite live region: says when the agent answered, a turn ended or a
 * permission is asked for. (The virtualized list itself is not live: its
 * items mount and unmount as it scrolls.)
 */
function Announcer({ state }: { state: ConversationState }) {
  const [msg, setMsg] = useState("");
  const seen = useRef<{ blocks: number; turns: string; perms: number } | null>(null);
  useEffect(() => {
    const turnsKey = state.turns.map((t) => t.status).join(",");
    const prev = seen.current;
    seen.current = { blocks: state.blocks.length, turns: turnsKey, perms: state.pendingPermissions.length };
    if (!prev) return; // nothing to announce for what was there on load
    if (state.pendingPermissions.length > prev.perms) {
      const p = state.pendingPermissions[state.pendingPermissions.length - 1]!;
      setMsg(`Permission asked to run ${p.toolName}.`);
      return;
    }
    if (turnsKey !== prev.turns) {
      const t = state.turns[state.turns.length - 1];
      if (t && t.status !== "running") {
        const last = [...state.blocks].reverse().find((b) => b.type === "assistant_text" && b.content);
        setMsg(
          t.status === "failed"
            ? `The turn failed: ${t.error ?? ""}`
            : t.interrupted
              ? "The turn was interrupted."
              : `Agent: ${stripAnsi(last?.content ?? "done").slice(0, 300)}`,
        );
      }
    }
  }, [state.blocks.length, state.turns, state.pendingPermissions.length]);
  return (
    <div className="sr-only" aria-live="polite" aria-atomic="true" data-testid="announcer">
      {msg}
    </div>
  );
}

function Permissions({
  sessionId,
  pending,
  onInterrupt,
  composer,
}: {
  sessionId: string;
  pending: readonly PermissionRequestedPayload[];
  onInterrupt: () => void;
  composer: React.RefObject<HTMLTextAreaElement | null>;
}) {
  if (pending.length === 0) return null;
  return (
    <div className="permissions" aria-label="Permission requests">
      {pending.map((p, i) => (
        <PermissionCard key={p.requestId} sessionId={sessionId} req={p} first={i === 0} onInterrupt={onInterrupt} composer={composer} />
      ))}
    </div>
  );
}

const EDIT_TOOLS = /^(write|edit|multiedit|notebookedit|str_replace_based_edit_tool|apply_patch|patch|replace|write_file)$/i;

function PermissionCard({
  sessionId,
  req,
  first,
  onInterrupt,
  composer,
}: {
  sessionId: string;
  req: PermissionRequestedPayload;
  first: boolean;
  onInterrupt: () => void;
  composer: React.RefObject<HTMLTextAreaElement | null>;
}) {
  const { client } = useApp();
  const now = useNow(1000);
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState<string | null>(null);
  const [denying, setDenying] = useState(false);
  const [reason, setReason] = useState("");
  const card = useRef<HTMLDivElement>(null);
  const reasonRef = useRef<HTMLInputElement>(null);
  const left = Math.max(0, Math.ceil((Date.parse(req.expiresAt) - now) / 1000));
  const expired = left === 0;
  const isEdit = EDIT_TOOLS.test(req.toolName) || !!editsOf(req.input);

  // The request takes the focus (the first one, once), so its keys work at once.
  useEffect(() => {
    if (first) card.current?.focus();
  }, [first]);
  useEffect(() => {
    if (denying) reasonRef.current?.focus();
  }, [denying]);

  const answer = async (behavior: "allow" | "deny", scope?: "session", message?: string) => {
    setBusy(true);
    setErr(null);
    try {
      await client.answerPermission(sessionId, req.requestId, {
        behavior,
        ...(scope ? { scope } : {}),
        ...(message ? { message } : {}),
      });
      composer.current?.focus();
    } catch (e) {
      setErr(e instanceof Error ? e.message : String(e));
      setBusy(false);
    }
  };

  const onKey = (e: ReactKeyboardEvent) => {
    if (busy || expired) return;
    if (denying) {
      if (e.key === "Escape") {
        e.preventDefault();
        e.stopPropagation();
        setDenying(false);
        card.current?.focus();
      }
      return;
    }
    if (e.target !== card.current && (e.target as HTMLElement).tagName !== "BUTTON") return;
    const k = e.key.toLowerCase();
    if (k === "1" || k === "y" || (k === "enter" && e.target === card.current)) {
      e.preventDefault();
      void answer("allow");
    } else if (k === "2" || k === "a") {
      e.preventDefault();
      void answer("allow", "session");
    } else if (k === "3" || k === "n" || k === "d") {
      e.preventDefault();
      setDenying(true);
    } else if (k === "escape") {
      e.preventDefault();
      e.stopPropagation();
      onInterrupt();
    }
  };

  return (
    <div
      ref={card}
      className="permission"
      role="group"
      tabIndex={-1}
      aria-label={`Permission for ${req.toolName}`}
      aria-describedby={`perm-keys-${req.requestId}`}
      data-testid="permission-request"
      data-request-id={req.requestId}
      onKeyDown={onKey}
    >
      <div className="perm-head">
        <strong>{req.toolName}</strong> {isEdit ? "wants to change a file" : "wants to run"}
        <span className="countdown" data-testid="permission-countdown" aria-live="polite">
          {Number.isNaN(left) ? "" : left > 0 ? `${Math.floor(left / 60)}:${String(left % 60).padStart(2, "0")} left` : "expired"}
        </span>
      </div>
      <div className="perm-input" data-testid="permission-input">
        <ToolInput toolName={req.toolName} input={req.input} />
      </div>
      {err && (
        <div className="error-box small" role="alert">
          {err}
        </div>
      )}
      {denying ? (
        <form
          className="perm-deny"
          onSubmit={(e) => {
            e.preventDefault();
            void answer("deny", undefined, reason.trim() || undefined);
          }}
        >
          <label className="small">
            Tell the agent what to do instead (optional)
            <input ref={reasonRef} data-testid="permission-deny-message" value={reason} onChange={(e) => setReason(e.target.value)} placeholder="e.g. use the staging database" />
          </label>
          <div className="perm-actions">
            <button type="submit" className="danger" data-testid="permission-deny-send" disabled={busy || expired}>
              Deny
            </button>
            <button type="button" onClick={() => setDenying(false)}>
              Back
            </button>
          </div>
        </form>
      ) : (
        <div className="perm-actions">
          <button type="button" className="primary" data-testid="permission-allow" disabled={busy || expired} onClick={() => void answer("allow")}>
            Allow once <kbd>1</kbd>
          </button>
          <button type="button" data-testid="permission-allow-session" disabled={busy || expired} onClick={() => void answer("allow", "session")}>
            Allow {req.toolName} for this session <kbd>2</kbd>
          </button>
          <button type="button" data-testid="permission-deny" disabled={busy || expired} onClick={() => setDenying(true)}>
            Deny… <kbd>3</kbd>
          </button>
        </div>
      )}
      <div id={`perm-keys-${req.requestId}`} className="muted small perm-keys">
        Keys: 1 or Enter allow once · 2 allow for this session · 3 deny with a message · Esc stop the turn
      </div>
    </div>
  );
}

function QueuedMessages({ sessionId, queue }: { sessionId: string; queue: readonly QueuedMessage[] }) {
  const { client } = useApp();
  const [err, setErr] = useState<string | null>(null);
  if (queue.length === 0) return null;
  return (
    <div className="queued" aria-label="Queued messages" data-testid="queued-messages">
      <div className="muted small">
        {queue.length === 1 ? "1 message waits" : `${queue.length} messages wait`} for the running turn to end:
      </div>
      <ol>
        {queue.map((m) => (
          <li key={m.id} data-testid="queued-message" data-message-id={m.id}>
            <span className="q-text">{m.content}</span>
            {m.attachments?.length ? <span className="muted small"> (+{m.attachments.length} attached)</span> : null}
            <button
              type="button"
              className="linkish"
              aria-label={`Cancel the queued message: ${m.content.slice(0, 60)}`}
              data-testid="cancel-queued"
              onClick={() => {
                setErr(null);
                client.cancelQueued(sessionId, m.id).catch((e: unknown) => {
                  if (!(e instanceof AgentdError && e.code === "MESSAGE_NOT_FOUND")) setErr(e instanceof Error ? e.message : String(e));
                });
              }}
            >
              ✕
            </button>
          </li>
        ))}
      </ol>
      {err && (
        <div className="error-box small" role="alert">
          {err}
        </div>
      )}
    </div>
  );
}

/** A file picked or pasted into the composer, as the content part it is sent as. */
interface Picked {
  name: string;
  part: ContentPart;
  /** An image's data: URL, for the thumbnail. */
  preview?: string;
}

const COMPOSER_IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

/** Reads a file: an image becomes an image part, anything else a file part at its name. */
function pick(f: File): Promise<Picked> {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onerror = () => reject(new Error(`read ${f.name}: ${r.error?.message ?? "failed"}`));
    r.onload = () => {
      const url = String(r.result);
      const data = url.slice(url.indexOf(",") + 1);
      if (COMPOSER_IMAGE_TYPES.has(f.type)) resolve({ name: f.name || "image", preview: url, part: { type: "image", source: { type: "base64", mediaType: f.type, data } } });
      else resolve({ name: f.name, part: { type: "file", name: f.name, data } });
    };
    r.readAsDataURL(f);
  });
}

function Composer({
  sessionId,
  running,
  onInterrupt,
  inputRef,
  externalError,
}: {
  sessionId: string;
  running: boolean;
  onInterrupt: () => void;
  inputRef: React.RefObject<HTMLTextAreaElement | null>;
  externalError: string | null;
}) {
  const { client } = useApp();
  const [text, setText] = useState("");
  const [sending, setSending] = useState(false);
  const [err, setErr] = useState<string | null>(null);
  const [files, setFiles] = useState<Picked[]>([]);
  const fileInput = useRef<HTMLInputElement>(null);
  const add = async (list: Iterable<File>) => {
    setErr(null);
    try {
      const picked = await Promise.all([...list].map(pick));
      setFiles((cur) => [...cur, ...picked]);
    } catch (e) {
      setErr(e instanceof Error ? e.message : String(e));
    }
  };
  const send = async () => {
    const content = text.trim();
    if ((!content && files.length === 0) || sending) return;
    setSending(true);
    setErr(null);
    // Cleared at once, so what the user types while the request is out is
    // theirs (clearing after the answer wiped it); a refused message comes
    // back unless something new was typed meanwhile.
    setText("");
    const sent = files;
    setFiles([]);
    try {
      if (sent.length === 0) await client.sendMessage(sessionId, content);
      else {
        const parts: ContentPart[] = sent.map((f) => f.part);
        if (content) parts.push({ type: "text", text: content });
        await client.sendMessage(sessionId, parts);
      }
    } catch (e) {
      setText((cur) => (cur === "" ? content : cur));
      setFiles((cur) => (cur.length === 0 ? sent : cur));
      setErr(e instanceof Error ? e.message : String(e));
    } finally {
      setSending(false);
      inputRef.current?.focus();
    }
  };
  const shown = err ?? externalError;
  return (
    <form
      className="composer"
      onSubmit={(e) => {
        e.preventDefault();
        void send();
      }}
    >
      {shown && (
        <div className="error-box small" role="alert">
          {shown}
        </div>
      )}
      {files.length > 0 && (
        <div className="composer-attachments" data-testid="composer-attachments">
          {files.map((f, i) => (
            <span key={i} className="composer-attachment" data-testid="composer-attachment">
              {f.preview ? <img src={f.preview} alt={f.name} /> : <span className="small">📄 {f.name}</span>}
              <button type="button" className="linkish" aria-label={`Remove ${f.name}`} onClick={() => setFiles((cur) => cur.filter((_, j) => j !== i))}>
                ✕
              </button>
            </span>
          ))}
        </div>
      )}
      <div className="composer-row">
        <input
          ref={fileInput}
          type="file"
          multiple
          hidden
          data-testid="composer-file"
          onChange={(e) => {
            if (e.target.files) void add(e.target.files);
            e.target.value = "";
          }}
        />
        <button type="button" className="attach-button" data-testid="attach-button" title="Attach images or files" aria-label="Attach images or files" onClick={() => fileInput.current?.click()}>
          📎
        </button>
        <textarea
          ref={inputRef}
          data-testid="composer-input"
          aria-label="Message"
          placeholder={running ? "Queue a message for when this turn ends (Enter)…" : "Message (Enter to send, Shift+Enter for a new line)"}
          value={text}
          rows={2}
          onChange={(e) => setText(e.target.value)}
          onPaste={(e) => {
            const pasted = [...e.clipboardData.files];
            if (pasted.length > 0) {
              e.preventDefault();
              void add(pasted);
            }
          }}
          onKeyDown={(e) => {
            if (e.key === "Enter" && !e.shiftKey && !e.nativeEvent.isComposing) {
              e.preventDefault();
              void send();
            }
          }}
        />
        {running ? (
          <button type="button" className="danger" data-testid="interrupt-button" onClick={onInterrupt} title="Stop the turn (Esc)">
            Stop
          </button>
        ) : null}
        <button type="submit" className="primary" data-testid="send-button" disabled={sending || (!text.trim() && files.length === 0)}>
          {running ? "Queue" : "Send"}
        </button>
      </div>
    </form>
  );
}
