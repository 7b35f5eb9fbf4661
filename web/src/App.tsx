import { useCallback, useEffect, useRef, useState, useSyncExternalStore } from "react";
import { AgentdClient, AgentdError, EventSocket, type Me } from "@agentd/client";
import { AppContext, stats, useConnectionState, type App as AppT } from "./app-context";
import { NewSessionDialog, prefetchArchitectures } from "./NewSessionDialog";
import { SessionList, useSessions } from "./SessionList";
import { SessionView } from "./SessionView";
import { ErrorBoundary } from "./ErrorBoundary";
import { OidcSignIn, completeOidcSignIn, isOidcCallback } from "./SignIn";

const KEY_STORAGE = "agentd.apiKey";

// ---- routing: "/" and "/s/{id}", on the History API -------------------------
// Not "/sessions/{id}": the server keeps GET /sessions/{id} as a legacy REST
// alias, so a reload there would get JSON instead of the UI.

function subscribeLocation(cb: () => void): () => void {
  window.addEventListener("popstate", cb);
  return () => window.removeEventListener("popstate", cb);
}

export function navigate(path: string): void {
  if (location.pathname === path) return;
  history.pushState(null, "", path);
  dispatchEvent(new PopStateEvent("popstate"));
}

function useSessionRoute(): string | null {
  const path = useSyncExternalStore(subscribeLocation, () => location.pathname);
  const m = /^\/s\/([^/]+)/.exec(path);
  return m ? decodeURIComponent(m[1]!) : null;
}

// ---- auth gate --------------------------------------------------------------

type Auth = { state: "checking" } | { state: "need-key"; error?: string } | { state: "ready"; key: string | undefined };

export function App() {
  const [auth, setAuth] = useState<Auth>({ state: "checking" });

  const check = useCallback(async (key: string | undefined, fromUser: boolean) => {
    const probe = new AgentdClient(key ? { apiKey: key } : {});
    try {
      const { required } = await probe.auth();
      if (!required) return setAuth({ state: "ready", key: undefined });
      if (!key) return setAuth({ state: "need-key" });
      await probe.listSessions(); // validates the key
      localStorage.setItem(KEY_STORAGE, key);
      setAuth({ state: "ready", key });
    } catch (e) {
      const msg = e instanceof Error ? e.message : String(e);
      if (key && !fromUser) localStorage.removeItem(KEY_STORAGE);
      setAuth({ state: "need-key", ...(fromUser || key ? { error: msg } : { error: `Cannot reach the server: ${msg}` }) });
    }
  }, []);

  useEffect(() => {
    if (isOidcCallback()) {
      completeOidcSignIn().then(
        (token) => check(token, true),
        (e: unknown) => setAuth({ state: "need-key", error: e instanceof Error ? e.message : String(e) }),
      );
      return;
    }
    void check(localStorage.getItem(KEY_STORAGE) ?? undefined, false);
  }, [check]);

  if (auth.state === "checking") return <div className="center muted">Connecting…</div>;
  if (auth.state === "need-key") return <KeyPrompt error={auth.error} onSubmit={(k) => void check(k, true)} />;
  return (
    <Connected
      apiKey={auth.key}
      onUnauthorized={(why) => {
        localStorage.removeItem(KEY_STORAGE);
        setAuth({ state: "need-key", error: why });
      }}
      onSignOut={() => {
        localStorage.removeItem(KEY_STORAGE);
        setAuth({ state: "need-key" });
      }}
    />
  );
}

const REFUSED = "The server no longer accepts this sign-in (it expired or was revoked). Sign in again.";
const EXPIRED = "Your sign-in expired. Sign in again.";
// setTimeout's longest delay (about 24.8 days); later expiries need no timer yet.
const MAX_TIMER_MS = 2 ** 31 - 1;

function KeyPrompt({ error, onSubmit }: { error?: string | undefined; onSubmit: (key: string) => void }) {
  const [key, setKey] = useState("");
  return (
    <div className="center">
      <form
        className="modal"
        data-testid="api-key-form"
        aria-labelledby="key-title"
        onSubmit={(e) => {
          e.preventDefault();
          if (key.trim()) onSubmit(key.trim());
        }}
      >
        <h2 id="key-title">Sign in</h2>
        <OidcSignIn />
        <p className="muted small">This agentd server needs an API token (or its API key). It is kept in this browser's local storage.</p>
        <label>
          API key
          <input type="password" autoComplete="current-password" data-testid="api-key-input" value={key} onChange={(e) => setKey(e.target.value)} autoFocus />
        </label>
        {error && (
          <div className="error-box small" role="alert">
            {error}
          </div>
        )}
        <div className="modal-actions">
          <button type="submit" className="primary" data-testid="api-key-submit">
            Continue
          </button>
        </div>
      </form>
    </div>
  );
}

// ---- the app once connected -------------------------------------------------

function Connected({ apiKey, onUnauthorized, onSignOut }: { apiKey: string | undefined; onUnauthorized: (why: string) => void; onSignOut: () => void }) {
  // The socket lives in an effect so that its cleanup (closing it) pairs
  // with its creation, also under StrictMode's double effects.
  const [app, setApp] = useState<AppT | null>(null);
  const [me, setMe] = useState<Me | null>(null);
  const unauthorized = useRef(onUnauthorized);
  unauthorized.current = onUnauthorized;
  useEffect(() => {
    const client = new AgentdClient(apiKey ? { apiKey } : {});
    // A credential that stops being valid (expired, revoked) closes the
    // socket with 4001: ask to sign in again instead of retrying.
    const socket = EventSocket.forClient(client, { onUnauthorized: () => unauthorized.current(REFUSED) });
    setApp({ client, socket, unauthorized: () => unauthorized.current(REFUSED) });
    // Who is signed in, and until when: at expiry the UI asks to sign in
    // again rather than failing request by request.
    let expiry: ReturnType<typeof setTimeout> | undefined;
    let live = true;
    if (apiKey) {
      client.me().then(
        (m) => {
          if (!live) return;
          setMe(m);
          const left = m.expiresAt ? Date.parse(m.expiresAt) - Date.now() : NaN;
          if (left <= MAX_TIMER_MS) expiry = setTimeout(() => unauthorized.current(EXPIRED), Math.max(0, left));
        },
        (e: unknown) => {
          if (live && e instanceof AgentdError && e.status === 401) unauthorized.current(REFUSED);
        },
      );
    }
    window.__agentd = {
      socket,
      dropConnection: () => socket.dropConnection(),
      conversation: null,
      stats,
      connects: () => socket.connects,
    };
    const online = () => socket.reconnectNow();
    window.addEventListener("online", online);
    return () => {
      live = false;
      clearTimeout(expiry);
      window.removeEventListener("online", online);
      socket.close();
    };
  }, [apiKey]);
  if (!app) return null;
  return <Shell app={app} user={apiKey ? me : null} onSignOut={apiKey ? onSignOut : undefined} />;
}

function Shell({ app, user, onSignOut }: { app: AppT; user: Me | null; onSignOut: (() => void) | undefined }) {
  const [unavailable, setUnavailable] = useState<ReadonlySet<string>>(new Set());
  useEffect(() => {
    prefetchArchitectures(app.client)
      .then((a) => setUnavailable(new Set(a.filter((x) => !x.available).flatMap((x) => [x.name, ...x.aliases]))))
      .catch(() => {});
  }, [app.client]);
  const sessionId = useSessionRoute();
  const [dialog, setDialog] = useState(false);
  const conn = useConnectionState(app.socket);

  return (
    <AppContext.Provider value={app}>
      <Body sessionId={sessionId} conn={conn} unavailable={unavailable} onNew={() => setDialog(true)} user={user} onSignOut={onSignOut} />
      {dialog && (
        <NewSessionDialog
          onClose={() => setDialog(false)}
          onCreated={(id) => {
            setDialog(false);
            navigate(`/s/${encodeURIComponent(id)}`);
          }}
        />
      )}
    </AppContext.Provider>
  );
}

function Body({
  sessionId,
  conn,
  unavailable,
  onNew,
  user,
  onSignOut,
}: {
  sessionId: string | null;
  conn: string;
  unavailable: ReadonlySet<string>;
  onNew: () => void;
  user: Me | null;
  onSignOut: (() => void) | undefined;
}) {
  const { sessions, error } = useSessions();
  const summary = sessionId ? sessions.find((s) => s.sessionId === sessionId) : undefined;
  return (
    <div className={`layout${sessionId ? " has-session" : ""}`}>
      <a className="skip-link" href={sessionId ? "#conversation" : "#main"} data-testid="skip-link">
        Skip to {sessionId ? "the conversation" : "the main content"}
      </a>
      <header className="topbar">
        <a
          href="/"
          className="brand"
          onClick={(e) => {
            e.preventDefault();
            navigate("/");
          }}
        >
          agentd
        </a>
        <div className="topbar-right">
          <span className={`conn conn-${conn}`} role="status" data-testid="connection-state" data-state={conn}>
            {conn === "connected" ? "live" : conn === "reconnecting" ? "reconnecting…" : conn === "connecting" ? "connecting…" : "offline"}
          </span>
          {user && (
            <span className="current-user" data-testid="current-user" data-user-id={user.user.id} title={`${user.user.id} (${user.user.role}, ${user.user.tenant})`}>
              {user.user.name || user.user.id}
            </span>
          )}
          {onSignOut && (
            <button type="button" className="small-btn" data-testid="sign-out" onClick={onSignOut}>
              Sign out
            </button>
          )}
        </div>
      </header>
      <ErrorBoundary name="session list">
        <SessionList
          sessions={sessions}
          error={error}
          selected={sessionId}
          unavailable={unavailable}
          onSelect={(id) => navigate(id ? `/s/${encodeURIComponent(id)}` : "/")}
          onNew={onNew}
        />
      </ErrorBoundary>
      <main className="main" id="main" tabIndex={-1}>
        <ErrorBoundary name="session" resetKey={sessionId}>
          {sessionId ? (
            <SessionView key={sessionId} id={sessionId} summary={summary} onBack={() => navigate("/")} />
          ) : (
            <div className="center muted welcome">Select a session, or create one with “+ New”.</div>
          )}
        </ErrorBoundary>
      </main>
    </div>
  );
}
