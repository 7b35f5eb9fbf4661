// Keeping an OIDC sign-in alive: the bearer token (the provider's ID token)
// is traded for a new one (POST /api/auth/oidc/refresh) shortly before it
// expires, and once more when a request finds it expired (401). Refreshes
// are single-flight: however many requests and timers ask at once, one
// refresh runs and all share its result. A pasted API token (no expiry, no
// refresh token) is left alone.
//
// Nothing here logs or formats a token: errors carry only the status.

/** What the UI holds to authenticate; times are this browser's clock (ms). */
export interface Credential {
  token: string;
  /** When the token stops being accepted; absent for tokens that do not expire. */
  expiresAt?: number | undefined;
  /** Traded for a new token while the provider allows; absent: sign in again at expiry. */
  refreshToken?: string | undefined;
}

/**
 * The provider (or the server) refused the refresh token (400/401 from
 * /api/auth/oidc/refresh): no retry helps, the user signs in again.
 */
export class RefreshRefused extends Error {
  constructor(readonly status: number) {
    super(`refresh refused (${status})`);
    this.name = "RefreshRefused";
  }
}

/**
 * When to refresh a token with `left` ms to live: at 80% of that, or a
 * minute before expiry, whichever is sooner, but never before half of it (a
 * short-lived token would otherwise be refreshed at once, again and again),
 * less up to 10% jitter so that tabs and clients do not refresh in step.
 */
export function refreshDelay(left: number, random: number = Math.random()): number {
  if (!(left > 0)) return 0;
  const at = Math.max(left / 2, Math.min(left * 0.8, left - 60_000));
  return Math.max(0, at * (1 - 0.1 * random));
}

/** Transient refresh failures are retried after this (doubling, capped), until expiry. */
const RETRY_MS = 2_000;
const RETRY_MAX_MS = 30_000;
// setTimeout's longest delay (about 24.8 days); later timers are set nearer the time.
const MAX_TIMER_MS = 2 ** 31 - 1;

export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(t: unknown): void;
  random(): number;
}

const realClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (t) => clearTimeout(t as ReturnType<typeof setTimeout>),
  random: () => Math.random(),
};

export interface KeeperOptions {
  /** Trades a refresh token for a new credential; throws RefreshRefused when refused for good. */
  refresh: (refreshToken: string) => Promise<Credential>;
  /** A new credential is in use: store it, reconnect what carries the old one. */
  onToken: (c: Credential) => void;
  /** The token expired and could not be refreshed: ask to sign in again. */
  onExpired: () => void;
  /**
   * Runs fn holding a lock shared by this browser's tabs (Web Locks), so
   * that two tabs never spend the same refresh token; and `stored` reads
   * the credential another tab may have put in storage meanwhile.
   */
  lock?: <T>(fn: () => Promise<T>) => Promise<T>;
  stored?: () => Credential | null;
  clock?: Clock;
}

/**
 * Holds the current credential and refreshes it. All methods run on the
 * page's one thread; timers and promises interleave only at awaits.
 */
export class TokenKeeper {
  private cred: Credential;
  private readonly o: KeeperOptions;
  private readonly clock: Clock;
  private refreshTimer: unknown = null;
  private expiryTimer: unknown = null;
  private inflight: Promise<boolean> | null = null;
  private refused = false;
  private retryMs = RETRY_MS;
  private stopped = false;
  /** Refreshes done (for tests and the browser test hooks). */
  refreshes = 0;
  /**
   * Test hook: while true the timers do nothing, as in a tab the browser
   * froze, so that only a 401 or a 4001 close can start a refresh.
   */
  timersHeld = false;

  constructor(initial: Credential, opts: KeeperOptions) {
    this.cred = initial;
    this.o = opts;
    this.clock = opts.clock ?? realClock;
  }

  get credential(): Credential {
    return this.cred;
  }

  get token(): string {
    return this.cred.token;
  }

  /** Whether a refresh may still be tried. */
  get canRefresh(): boolean {
    return !!this.cred.refreshToken && !this.refused && !this.stopped;
  }

  /** Arms the timers for the current credential. */
  start(): void {
    this.stopped = false;
    this.schedule();
  }

  /** Stops every timer; a refresh in flight still settles but changes nothing. */
  stop(): void {
    this.stopped = true;
    this.clear();
  }

  /**
   * Refreshes now, or joins the refresh already running. Resolves true when
   * a new token is in use.
   */
  refreshNow(): Promise<boolean> {
    if (!this.canRefresh) return Promise.resolve(false);
    if (!this.inflight) {
      const run = () => this.doRefresh();
      const p = (this.o.lock ? this.o.lock(run) : run()).finally(() => {
        if (this.inflight === p) this.inflight = null;
      });
      this.inflight = p;
    }
    return this.inflight;
  }

  /**
   * A request sent with `sent` was answered 401. Returns the token to retry
   * with once (a newer one, refreshing if `sent` is still the current one),
   * or null when there is none: the caller then reports the 401.
   */
  async afterUnauthorized(sent: string | undefined): Promise<string | null> {
    if (this.stopped) return null;
    if (sent !== undefined && sent !== this.cred.token) return this.cred.token;
    return (await this.refreshNow()) ? this.cred.token : null;
  }

  /** Takes a credential another tab refreshed (the storage event), if it is newer. */
  adopt(c: Credential | null): void {
    if (this.stopped || !c || c.token === this.cred.token) return;
    if ((c.expiresAt ?? Infinity) <= (this.cred.expiresAt ?? 0)) return;
    this.use(c);
  }

  private async doRefresh(): Promise<boolean> {
    // Another tab may have refreshed while this one waited for the lock.
    const other = this.o.stored?.();
    if (other && other.token !== this.cred.token && (other.expiresAt ?? 0) > (this.cred.expiresAt ?? 0)) {
      this.use(other);
      return true;
    }
    const rt = this.cred.refreshToken;
    if (!rt || this.refused) return false;
    try {
      const next = await this.o.refresh(rt);
      if (this.stopped) return false;
      this.refreshes++;
      this.retryMs = RETRY_MS;
      // Providers that do not rotate refresh tokens send none: keep ours.
      this.use({ ...next, refreshToken: next.refreshToken ?? rt });
      return true;
    } catch (e) {
      if (this.stopped) return false;
      if (e instanceof RefreshRefused) {
        // For good: use the token while it lasts, then ask to sign in.
        this.refused = true;
        this.schedule();
      } else {
        // The server or the network failed: try again, until expiry.
        const wait = this.retryMs;
        this.retryMs = Math.min(RETRY_MAX_MS, this.retryMs * 2);
        this.setRefreshTimer(wait);
      }
      return false;
    }
  }

  private use(c: Credential): void {
    if (c.refreshToken !== this.cred.refreshToken) this.refused = false;
    this.cred = c;
    this.o.onToken(c);
    this.schedule();
  }

  private clear(): void {
    if (this.refreshTimer !== null) this.clock.clearTimeout(this.refreshTimer);
    if (this.expiryTimer !== null) this.clock.clearTimeout(this.expiryTimer);
    this.refreshTimer = this.expiryTimer = null;
  }

  private schedule(): void {
    this.clear();
    if (this.stopped || this.cred.expiresAt === undefined) return;
    const left = this.cred.expiresAt - this.clock.now();
    if (left > MAX_TIMER_MS) return;
    if (this.canRefresh) this.setRefreshTimer(refreshDelay(left, this.clock.random()));
    this.expiryTimer = this.clock.setTimeout(
      () => {
        this.expiryTimer = null;
        if (!this.timersHeld) void this.expired();
      },
      Math.max(0, left),
    );
  }

  private setRefreshTimer(ms: number): void {
    if (this.refreshTimer !== null) this.clock.clearTimeout(this.refreshTimer);
    this.refreshTimer = this.clock.setTimeout(() => {
      this.refreshTimer = null;
      if (!this.timersHeld) void this.refreshNow();
    }, ms);
  }

  /** At expiry: a last refresh (or the one running), else sign in again. */
  private async expired(): Promise<void> {
    const expiring = this.cred.token;
    if (await this.refreshNow()) return;
    if (this.stopped || this.cred.token !== expiring) return;
    this.stop();
    this.o.onExpired();
  }
}

/**
 * Wraps fetch for the REST client: a 401 answer is retried once with a
 * refreshed token (the Authorization header replaced), when the keeper has
 * one to give. Other answers, and requests without a bearer token, pass
 * through as they are.
 */
export function refreshingFetch(
  keeper: () => TokenKeeper | null,
  f: (input: string, init?: RequestInit) => Promise<Response>,
): (input: string, init?: RequestInit) => Promise<Response> {
  return async (input, init) => {
    const res = await f(input, init);
    const k = keeper();
    if (res.status !== 401 || !k || !init?.headers) return res;
    const headers = new Headers(init.headers);
    const sent = /^Bearer (.+)$/.exec(headers.get("Authorization") ?? "")?.[1];
    if (sent === undefined) return res;
    const next = await k.afterUnauthorized(sent);
    if (next === null) return res;
    headers.set("Authorization", `Bearer ${next}`);
    return f(input, { ...init, headers });
  };
}

/**
 * Reads a sign-in answer (`{token, expiresAt, refreshToken?}` from
 * /api/auth/oidc/token or /refresh) into a Credential whose expiry is on
 * this browser's clock: the time left is measured on the server's clock
 * (its Date header, whole seconds: up to a second late, which the refresh
 * margin covers), so a browser whose clock is off still refreshes in time.
 */
export function credentialFrom(body: { token: string; expiresAt?: string; refreshToken?: string }, serverDate: string | null, now = Date.now()): Credential {
  const c: Credential = { token: body.token };
  const exp = body.expiresAt ? Date.parse(body.expiresAt) : NaN;
  if (!Number.isNaN(exp)) {
    const server = serverDate ? Date.parse(serverDate) : NaN;
    c.expiresAt = Number.isNaN(server) ? exp : now + (exp - server);
  }
  if (body.refreshToken) c.refreshToken = body.refreshToken;
  return c;
}

/** POST /api/auth/oidc/refresh: a new credential, or RefreshRefused (400/401). */
export async function refreshAtServer(refreshToken: string, f: typeof fetch = fetch): Promise<Credential> {
  const resp = await f("/api/auth/oidc/refresh", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ refreshToken }),
  });
  if (resp.status === 400 || resp.status === 401 || resp.status === 403 || resp.status === 404) throw new RefreshRefused(resp.status);
  if (!resp.ok) throw new Error(`refresh failed (${resp.status})`);
  const body = (await resp.json()) as { token?: string; expiresAt?: string; refreshToken?: string };
  if (!body.token) throw new RefreshRefused(resp.status);
  return credentialFrom({ ...body, token: body.token }, resp.headers.get("Date"));
}

// ---- storage ------------------------------------------------------------------
// The credential is kept in localStorage, where the UI has always kept the
// bearer token (so a reload or a new tab stays signed in). The refresh
// token sits beside it. That is acceptable here because only this origin's
// scripts can read it, the UI runs no third-party script and renders no
// server or model text as HTML (React elements only), so what could read
// the refresh token (an XSS) could already act with the bearer token; and
// it is useless without this server, which holds the provider client.
// An httpOnly cookie would need the server to keep it (an API change).
// Sign-out removes both.

export const TOKEN_KEY = "agentd.apiKey";
const REFRESH_KEY = "agentd.auth"; // JSON {expiresAt?, refreshToken?}

export function loadCredential(s: Storage = localStorage): Credential | null {
  const token = s.getItem(TOKEN_KEY);
  if (!token) return null;
  const c: Credential = { token };
  try {
    const extra = JSON.parse(s.getItem(REFRESH_KEY) ?? "null") as { expiresAt?: unknown; refreshToken?: unknown } | null;
    if (extra && typeof extra.expiresAt === "number") c.expiresAt = extra.expiresAt;
    if (extra && typeof extra.refreshToken === "string") c.refreshToken = extra.refreshToken;
  } catch {
    // a damaged entry: the token alone
  }
  return c;
}

export function saveCredential(c: Credential, s: Storage = localStorage): void {
  s.setItem(TOKEN_KEY, c.token);
  if (c.expiresAt === undefined && !c.refreshToken) s.removeItem(REFRESH_KEY);
  else s.setItem(REFRESH_KEY, JSON.stringify({ expiresAt: c.expiresAt, refreshToken: c.refreshToken }));
}

export function clearCredential(s: Storage = localStorage): void {
  s.removeItem(TOKEN_KEY);
  s.removeItem(REFRESH_KEY);
}

/** Whether a storage event concerns the credential. */
export function isCredentialKey(key: string | null): boolean {
  return key === null || key === TOKEN_KEY || key === REFRESH_KEY; // null: storage.clear()
}

/** Web Locks across this browser's tabs, when the browser has them. */
export function tabLock(): (<T>(fn: () => Promise<T>) => Promise<T>) | undefined {
  const locks = (globalThis.navigator as { locks?: { request<T>(name: string, fn: () => Promise<T>): Promise<T> } } | undefined)?.locks;
  if (!locks) return undefined;
  return (fn) => locks.request("agentd.oidc.refresh", fn);
}
