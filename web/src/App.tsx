import { useCallback, useEffect, useRef, useState, useSyncExternalStore } from "react";
import { AgentdClient, AgentdError, EventSocket, type Me } from "@agentd/client";
import { AppContext, stats, useConnectionState, type App as AppT } from "./app-context";
import { NewSessionDialog, prefetchArchitectures } from "./NewSessionDialog";
import { SessionList, useSessions } from "./SessionList";
import { SessionView } from "./SessionView";
import { ErrorBoundary } from "./ErrorBoundary";
import { OidcSignIn, completeOidcSignIn, isOidcCallback } from "./SignIn";
import {
  RefreshRefused,
  TokenKeeper,
  clearCredential,
  isCredentialKey,
  loadCredential,
  refreshAtServer,
  refreshingFetch,
  saveCredential,
  tabLock,
  type Credential,
} from "./lib/auth";

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

type Auth = { state: "checking" } | { state: "need-key"; error?: string } | { state: "ready"; cred: Credential | undefined };

export function App() {
  const [auth, setAuth] = useState<Auth>({ state: "checking" });

  const check = useCallback(async (given: Credential | undefined, fromUser: boolean) => {
    let cred = given;
    try {
      const { required } = await new AgentdClient({}).auth();
      if (!required) return setAuth({ state: "ready", cred: undefined });
      if (!cred) return setAuth({ state: "need-key" });
      // A sign-in kept from an earlier visit may have expired meanwhile:
      // refresh it first rather than be refused (a live one is refreshed
      // by the keeper, on its schedule).
      if (!fromUser && cred.refreshToken && cred.expiresAt !== undefined && cred.expiresAt - Date.now() < 2_000) {
        try {
          cred = { refreshToken: cred.refreshToken, ...(await refreshAtServer(cred.refreshToken)) };
        } catch (e) {
          if (!(e instanceof RefreshRefused)) throw e;
          clearCredential();
          return setAuth({ state: "need-key", error: EXPIRED });
        }
      }
      await new AgentdClient({ apiKey: cred.token }).listSessions(); // validates the key
      saveCredential(cred);
      setAuth({ state: "ready", cred });
    } catch (e) {
      const msg = e instanceof Error ? e.message : String(e);
      if (cred && !fromUser) clearCredential();
      setAuth({ state: "need-key", ...(fromUser || cred ? { error: msg } : { error: `Cannot reach the server: ${msg}` }) });
    }
  }, []);

  useEffect(() => {
    if (isOidcCallback()) {
      completeOidcSignIn().then(
        (cred) => check(cred, true),
        (e: unknown) => setAuth({ state: "need-key", error: e instanceof Error ? e.message : String(e) }),
      );
      return;
    }
    void check(loadCredential() ?? undefined, false);
  }, [check]);

  if (auth.state === "checking") return <div className="center muted">Connecting…</div>;
  if (auth.state === "need-key") return <KeyPrompt error={auth.error} onSubmit={(k) => void check({ token: k }, true)} />;
  return (
    <Connected
      cred={auth.cred}
      onUnauthorized={(why) => {
        clearCredential();
        setAuth({ state: "need-key", error: why });
      }}
      onSignOut={() => {
        clearCredential(); // the refresh token too
        setAuth({ state: "need-key" });
      }}
    />
  );
}

const REFUSED = "The server no longer accepts this sign-in (it expired or was revoked). Sign in again.";
const EXPIRED = "Your sign-in expired. Sign in again.";
const SIGNED_OUT = "You signed out in another tab.";
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

function Connected({ cred, onUnauthorized, onSignOut }: { cred: Credential | undefined; onUnauthorized: (why: string) => void; onSignOut: () => void }) {
  // The socket lives in an effect so that its cleanup (closing it) pairs
  // with its creation, also under StrictMode's double effects.
  const [app, setApp] = useState<AppT | null>(null);
  const [me, setMe] = useState<Me | null>(null);
  const unauthorized = useRef(onUnauthorized);
  unauthorized.current = onUnauthorized;
  useEffect(() => {
    let live = true;
    // An OIDC sign-in (it expires) is kept alive by the keeper: refreshed
    // before expiry and after a 401, swapped in place (REST calls read
    // client.apiKey, the socket reconnects with it and resumes after its
    // last seq). A pasted API token has no keeper.
    let keeper: TokenKeeper | null = null;
    const client = new AgentdClient(cred ? { apiKey: cred.token, fetch: refreshingFetch(() => keeper, (i, init) => fetch(i, init)) } : {});
    const refused = () => {
      const exp = keeper?.credential.expiresAt;
      unauthorized.current(exp !== undefined && Date.now() >= exp - 5_000 ? EXPIRED : REFUSED);
    };
    let socketToken: string | undefined;
    const newSocket = () =>
      new EventSocket({
        url: () => {
          socketToken = client.apiKey;
          return client.wsUrl("/api/ws");
        },
        // A credential that stops being valid (expired, revoked) closes the
        // socket with 4001: refresh it if possible (a new socket, whose
        // subscribers resume), else ask to sign in again.
        onUnauthorized: () => {
          if (!keeper?.canRefresh) return refused();
          void keeper.afterUnauthorized(socketToken).then((t) => {
            if (!live) return;
            if (t === null) return refused();
            socket = newSocket();
            setApp({ client, socket, unauthorized: () => refused() });
          });
        },
      });
    let socket = newSocket();
    if (cred && (cred.expiresAt !== undefined || cred.refreshToken)) {
      keeper = new TokenKeeper(cred, {
        refresh: (rt) => refreshAtServer(rt),
        onToken: (c) => {
          if (!live) return;
          saveCredential(c);
          client.apiKey = c.token;
          // Hand the open socket the new token (the server closes a socket
          // whose token expires); if it cannot take it (not connected, an
          // older server), reconnect with it: the socket resumes after its
          // last seq.
          const s = socket;
          if (s.state !== "closed") {
            void s.renew(c.token).then((ok) => {
              if (ok || !live || s !== socket || s.state === "closed") return;
              s.dropConnection();
              s.reconnectNow();
            });
          }
          // Re-render what put the token in a URL (downloads).
          setApp((a) => (a ? { ...a } : a));
        },
        onExpired: () => {
          if (live) unauthorized.current(EXPIRED);
        },
        lock: tabLock(),
        stored: loadCredential,
      });
      keeper.start();
    }
    setApp({ client, socket, unauthorized: () => refused() });
    // Who is signed in, and, for a token the keeper does not watch (a
    // pasted API token with an expiry), until when: at expiry the UI asks
    // to sign in again rather than failing request by request.
    let expiry: ReturnType<typeof setTimeout> | undefined;
    if (cred) {
      client.me().then(
        (m) => {
          if (!live) return;
          setMe(m);
          if (keeper) return;
          const left = m.expiresAt ? Date.parse(m.expiresAt) - Date.now() : NaN;
          if (left <= MAX_TIMER_MS) expiry = setTimeout(() => unauthorized.current(EXPIRED), Math.max(0, left));
        },
        (e: unknown) => {
          if (live && e instanceof AgentdError && e.status === 401) refused();
        },
      );
    }
    window.__agentd = {
      get socket() {
        return socket;
      },
      dropConnection: () => socket.dropConnection(),
      conversation: null,
      stats,
      connects: () => socket.connects,
      refreshes: () => keeper?.refreshes ?? 0,
      holdRefreshTimers: (held) => {
        if (keeper) keeper.timersHeld = held;
      },
    };
    const online = () => socket.reconnectNow();
    window.addEventListener("online", online);
    // Another tab refreshed: take its token. Another tab signed out (or was
    // refused): this one is signed out too.
    const storage = (e: StorageEvent) => {
      if (!cred || !isCredentialKey(e.key)) return;
      const now = loadCredential();
      if (!now) return unauthorized.current(SIGNED_OUT);
      keeper?.adopt(now);
    };
    window.addEventListener("storage", storage);
    return () => {
      live = false;
      keeper?.stop();
      clearTimeout(expiry);
      window.removeEventListener("online", online);
      window.removeEventListener("storage", storage);
      socket.close();
    };
  }, [cred]);
  if (!app) return null;
  return <Shell app={app} user={cred ? me : null} onSignOut={cred ? onSignOut : undefined} />;
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
