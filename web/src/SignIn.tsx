// Single sign-on for servers with an OpenID Connect provider: the
// authorization code flow with PKCE (S256). The browser goes to the
// provider; it comes back to /auth/callback with a code, which the server
// exchanges (POST /api/auth/oidc/token) for the bearer token the UI then
// uses like a pasted API token, with its expiry and, when the provider
// gives one (the offline_access scope), a refresh token that lib/auth.ts
// trades for a new token before it expires.
import { useEffect, useState } from "react";
import { credentialFrom, type Credential } from "./lib/auth";

type OidcInfo = { issuer: string; clientId: string; authorizationEndpoint?: string; scopes: string[] };

const PENDING = "agentd.oidc.pending"; // sessionStorage: {state, verifier, back}
export const CALLBACK_PATH = "/auth/callback";

function b64url(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function random(n: number): string {
  const b = new Uint8Array(n);
  crypto.getRandomValues(b);
  return b64url(b);
}

async function challengeOf(verifier: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  return b64url(new Uint8Array(digest));
}

function redirectUri(): string {
  return `${location.origin}${CALLBACK_PATH}`;
}

/** Sends the browser to the provider's sign-in page. */
async function startSignIn(info: OidcInfo): Promise<void> {
  if (!info.authorizationEndpoint) throw new Error(`the provider ${info.issuer} cannot be reached by the server`);
  const state = random(16);
  const verifier = random(32);
  sessionStorage.setItem(PENDING, JSON.stringify({ state, verifier, back: location.pathname }));
  const q = new URLSearchParams({
    client_id: info.clientId,
    redirect_uri: redirectUri(),
    response_type: "code",
    scope: info.scopes.join(" "),
    state,
    code_challenge: await challengeOf(verifier),
    code_challenge_method: "S256",
  });
  location.assign(`${info.authorizationEndpoint}?${q}`);
}

/** Whether this page load is the provider sending the browser back. */
export function isOidcCallback(): boolean {
  return location.pathname === CALLBACK_PATH;
}

/**
 * Finishes a sign-in on /auth/callback: checks the state, has the server
 * exchange the code, and returns the credential (the URL is put back to
 * where the sign-in started).
 */
export function completeOidcSignIn(): Promise<Credential> {
  // One exchange per page load, also under StrictMode's double effects
  // (the code can be used once).
  completing ??= exchange();
  return completing;
}

let completing: Promise<Credential> | undefined;

async function exchange(): Promise<Credential> {
  const params = new URLSearchParams(location.search);
  const pending = JSON.parse(sessionStorage.getItem(PENDING) ?? "null") as { state: string; verifier: string; back: string } | null;
  sessionStorage.removeItem(PENDING);
  history.replaceState(null, "", pending?.back && pending.back !== CALLBACK_PATH ? pending.back : "/");
  if (params.get("error")) throw new Error(`sign-in failed: ${params.get("error_description") ?? params.get("error")}`);
  if (!pending || params.get("state") !== pending.state) throw new Error("sign-in failed: the answer does not match this browser's request");
  const resp = await fetch("/api/auth/oidc/token", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ code: params.get("code"), codeVerifier: pending.verifier, redirectUri: redirectUri() }),
  });
  const body = (await resp.json()) as { token?: string; expiresAt?: string; refreshToken?: string; error?: string };
  if (!resp.ok || !body.token) throw new Error(`sign-in failed: ${body.error ?? resp.statusText}`);
  return credentialFrom({ ...body, token: body.token }, resp.headers.get("Date"));
}

/** A "Sign in with …" button, shown when the server has a provider. */
export function OidcSignIn() {
  const [info, setInfo] = useState<OidcInfo | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    fetch("/api/auth")
      .then((r) => r.json() as Promise<{ oidc?: OidcInfo }>)
      .then((a) => setInfo(a.oidc ?? null))
      .catch(() => setInfo(null));
  }, []);
  if (!info) return null;
  return (
    <div className="oidc-sign-in">
      <button
        type="button"
        className="primary"
        data-testid="oidc-sign-in"
        onClick={() => startSignIn(info).catch((e: unknown) => setError(e instanceof Error ? e.message : String(e)))}
      >
        Sign in with {new URL(info.issuer).host}
      </button>
      {error && (
        <div className="error-box small" role="alert">
          {error}
        </div>
      )}
      <p className="muted small">or paste an API token:</p>
    </div>
  );
}
