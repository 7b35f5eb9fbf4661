// REST client for every route in docs/api.md. Uses the platform fetch.

import type {
  AccessPage,
  AgentProfileSummary,
  APIToken,
  Architecture,
  AuthInfo,
  Budget,
  BudgetReport,
  CreatedToken,
  Me,
  NewToken,
  NewUser,
  OwnerScope,
  ProviderKey,
  Share,
  ShareAccess,
  SignIn,
  User,
  UserUpdate,
  CreateSessionRequest,
  ArtifactRef,
  ContentPart,
  CreateSessionResponse,
  EventsPage,
  FileEntry,
  Json,
  PermissionAnswer,
  QueuedMessage,
  SendMessageResponse,
  SessionChanges,
  SessionOptions,
  SessionState,
  SessionSuccess,
  SessionSummary,
  SyncResponse,
  TerminateEnvironmentResponse,
  UpdateOptionsResponse,
} from "./types.js";

/** An error answer of the API: `{"error": "…", "code": "UPPER_SNAKE"}` plus the HTTP status. */
export class AgentdError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.name = "AgentdError";
    this.status = status;
    this.code = code;
  }
}

export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

export interface ClientOptions {
  /** Server origin, e.g. "http://127.0.0.1:8080"; "" for same-origin (browser). */
  baseUrl?: string;
  /** Sent as `Authorization: Bearer <key>` (REST) and `access_token` (WebSocket, SSE). */
  apiKey?: string;
  fetch?: FetchLike;
}

/** Encodes a workspace path for files/{path…}: each segment escaped, slashes kept. */
export function encodePath(path: string): string {
  return path
    .split("/")
    .filter((s) => s !== "")
    .map(encodeURIComponent)
    .join("/");
}

export class AgentdClient {
  readonly baseUrl: string;
  apiKey: string | undefined;
  private readonly fetchImpl: FetchLike;

  constructor(opts: ClientOptions = {}) {
    this.baseUrl = (opts.baseUrl ?? "").replace(/\/+$/, "");
    this.apiKey = opts.apiKey;
    const f = opts.fetch ?? (globalThis.fetch as FetchLike | undefined);
    if (!f) throw new Error("agentd client: no fetch implementation");
    this.fetchImpl = (input, init) => f(input, init);
  }

  /** The absolute URL of a path, for fetch. */
  url(path: string): string {
    return this.baseUrl + path;
  }

  /**
   * A ws:// or wss:// URL for path with access_token added when a key is set
   * (browsers cannot set headers on a WebSocket).
   */
  wsUrl(path: string, query: Record<string, string | number> = {}): string {
    let base = this.baseUrl;
    if (!base) {
      const loc = (globalThis as { location?: { protocol: string; host: string } }).location;
      if (!loc) throw new Error("agentd client: baseUrl is required outside a browser");
      base = `${loc.protocol}//${loc.host}`;
    }
    const u = new URL(base + path);
    u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
    for (const [k, v] of Object.entries(query)) u.searchParams.set(k, String(v));
    if (this.apiKey) u.searchParams.set("access_token", this.apiKey);
    return u.toString();
  }

  /** Low-level request: adds auth, throws AgentdError for non-2xx answers. */
  async request(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Response> {
    const h: Record<string, string> = { Accept: "application/json", ...headers };
    if (this.apiKey) h.Authorization = `Bearer ${this.apiKey}`;
    const init: RequestInit = { method, headers: h };
    if (body !== undefined) init.body = JSON.stringify(body);
    // Every state-changing request says JSON, also without a body (the
    // server may refuse one that does not).
    if (body !== undefined || (method !== "GET" && method !== "HEAD")) h["Content-Type"] = "application/json";
    const res = await this.fetchImpl(this.url(path), init);
    if (!res.ok) throw await errorFrom(res);
    return res;
  }

  private async json<T>(method: string, path: string, body?: unknown): Promise<T> {
    const res = await this.request(method, path, body);
    return (await res.json()) as T;
  }

  health(): Promise<{ status: string }> {
    return this.json("GET", "/health");
  }
  /** Whether and how to authenticate (token, OIDC provider). Needs no key itself. */
  auth(): Promise<AuthInfo> {
    return this.json("GET", "/api/auth");
  }
  async listProfiles(): Promise<AgentProfileSummary[]> {
    return (await this.json<{ profiles: AgentProfileSummary[] }>("GET", "/api/agent-profiles")).profiles;
  }
  getProfile(id: string): Promise<{ [key: string]: Json }> {
    return this.json("GET", `/api/agent-profiles/${encodeURIComponent(id)}`);
  }
  async listArchitectures(): Promise<Architecture[]> {
    return (await this.json<{ architectures: Architecture[] }>("GET", "/api/architectures")).architectures;
  }
  createSession(req: CreateSessionRequest): Promise<CreateSessionResponse> {
    return this.json("POST", "/api/sessions", req);
  }
  async listSessions(): Promise<SessionSummary[]> {
    return (await this.json<{ sessions: SessionSummary[] }>("GET", "/api/sessions")).sessions;
  }
  /** A session's state: its last blocks (limit, default 200, and before: a block id, to page back); with {content: true} its workspace files' text too (bounded). */
  getSession(id: string, opts: { content?: boolean; limit?: number; before?: string } = {}): Promise<SessionState> {
    const q = new URLSearchParams();
    if (opts.content) q.set("include", "content");
    if (opts.limit !== undefined) q.set("limit", String(opts.limit));
    if (opts.before !== undefined) q.set("before", opts.before);
    const qs = q.toString();
    return this.json("GET", `/api/sessions/${encodeURIComponent(id)}${qs ? "?" + qs : ""}`);
  }
  /**
   * Changes a session's options (a null value removes a key): keys its
   * architecture reads, else 400 UNKNOWN_OPTION. The agent gets them when
   * it next starts (a CLI started per turn: at the next turn).
   */
  updateOptions(id: string, sessionOptions: SessionOptions): Promise<UpdateOptionsResponse> {
    return this.json("PATCH", `/api/sessions/${encodeURIComponent(id)}/options`, { sessionOptions });
  }
  /** Persists the session's workspace and agent transcript to the server's store now. */
  syncSession(id: string): Promise<SyncResponse> {
    return this.json("POST", `/api/sessions/${encodeURIComponent(id)}/sync`);
  }
  /** Stops the session's environment and keeps the session: the next message starts a new one. */
  terminateEnvironment(id: string): Promise<TerminateEnvironmentResponse> {
    return this.json("POST", `/api/sessions/${encodeURIComponent(id)}/environment/terminate`);
  }
  /**
   * Sends a user message: it starts a turn, or, while one runs, waits in the
   * session's queue (the answer has queued and messageId). With
   * {queue: false} a busy session answers 409 SESSION_BUSY instead.
   */
  sendMessage(id: string, content: string | ContentPart[], opts: { queue?: boolean } = {}): Promise<SendMessageResponse> {
    return this.json("POST", `/api/sessions/${encodeURIComponent(id)}/messages`, { content, ...(opts.queue === false ? { queue: false } : {}) });
  }
  /** The messages waiting in the session's queue. */
  async listQueue(id: string): Promise<QueuedMessage[]> {
    return (await this.json<{ messages: QueuedMessage[] }>("GET", `/api/sessions/${encodeURIComponent(id)}/queue`)).messages;
  }
  /** Drops a queued message (404 MESSAGE_NOT_FOUND once it started or was dropped). */
  cancelQueued(id: string, messageId: string): Promise<{ success: boolean }> {
    return this.json("DELETE", `/api/sessions/${encodeURIComponent(id)}/queue/${encodeURIComponent(messageId)}`);
  }
  /** Sets a session's name ("" clears it). */
  renameSession(id: string, name: string): Promise<SessionSummary> {
    return this.json("PATCH", `/api/sessions/${encodeURIComponent(id)}`, { name });
  }
  /** What each turn, and the whole session, changed in the workspace. */
  getChanges(id: string): Promise<SessionChanges> {
    return this.json("GET", `/api/sessions/${encodeURIComponent(id)}/changes`);
  }
  /** A file content of the changes view, by its sha256. */
  changedContent(id: string, sha256: string): Promise<Response> {
    return this.request("GET", `/api/sessions/${encodeURIComponent(id)}/changes/content/${encodeURIComponent(sha256)}`, undefined, { Accept: "*/*" });
  }
  /** The URL of the workspace as a zip or tar.gz download (with access_token when a key is set). */
  archiveUrl(id: string, format: "zip" | "tar.gz" = "zip"): string {
    const q = new URLSearchParams({ format });
    if (this.apiKey) q.set("access_token", this.apiKey);
    return this.url(`/api/sessions/${encodeURIComponent(id)}/archive?${q.toString()}`);
  }
  interrupt(id: string): Promise<{ success: boolean }> {
    return this.json("POST", `/api/sessions/${encodeURIComponent(id)}/interrupt`, {});
  }
  answerPermission(id: string, requestId: string, answer: PermissionAnswer): Promise<{ success: boolean }> {
    return this.json(
      "POST",
      `/api/sessions/${encodeURIComponent(id)}/permissions/${encodeURIComponent(requestId)}`,
      answer,
    );
  }
  async listFiles(id: string): Promise<FileEntry[]> {
    return (await this.json<{ files: FileEntry[] }>("GET", `/api/sessions/${encodeURIComponent(id)}/files`)).files;
  }
  /** The raw bytes of a workspace file, as a Response (use .text(), .arrayBuffer(), .blob()). */
  readFile(id: string, path: string): Promise<Response> {
    return this.request("GET", `/api/sessions/${encodeURIComponent(id)}/files/${encodePath(path)}`, undefined, {
      Accept: "*/*",
    });
  }
  /** Writes a workspace file (created or replaced): 413 above the server's upload limit. */
  async putFile(id: string, path: string, data: Blob | ArrayBuffer | Uint8Array | string): Promise<FileEntry> {
    const h: Record<string, string> = { Accept: "application/json", "Content-Type": "application/octet-stream" };
    if (this.apiKey) h.Authorization = `Bearer ${this.apiKey}`;
    const res = await this.fetchImpl(this.url(`/api/sessions/${encodeURIComponent(id)}/files/${encodePath(path)}`), {
      method: "PUT",
      headers: h,
      body: data as BodyInit,
    });
    if (!res.ok) throw await errorFrom(res);
    return (await res.json()) as FileEntry;
  }
  /**
   * An artifact's bytes (an image, a file, an output kept whole), as a
   * Response; with range, those bytes only (inclusive end; 206).
   */
  artifact(id: string, sha256: string, range?: { start: number; end?: number }): Promise<Response> {
    const headers: Record<string, string> = { Accept: "*/*" };
    if (range) headers.Range = `bytes=${range.start}-${range.end ?? ""}`;
    return this.request("GET", `/api/sessions/${encodeURIComponent(id)}/artifacts/${encodeURIComponent(sha256)}`, undefined, headers);
  }
  /**
   * An artifact's whole content, fetched by ranges of chunkSize bytes
   * (default 1 MiB); onProgress gets the bytes read so far.
   */
  async fetchArtifact(
    id: string,
    ref: Pick<ArtifactRef, "sha256" | "size">,
    opts: { chunkSize?: number; onProgress?: (read: number, total: number) => void; signal?: AbortSignal } = {},
  ): Promise<Uint8Array> {
    const chunk = opts.chunkSize ?? 1 << 20;
    const out = new Uint8Array(ref.size);
    let off = 0;
    while (off < ref.size) {
      if (opts.signal?.aborted) throw new Error("aborted");
      const end = Math.min(off + chunk, ref.size) - 1;
      const res = await this.artifact(id, ref.sha256, { start: off, end });
      const part = new Uint8Array(await res.arrayBuffer());
      if (part.length === 0 || off + part.length > ref.size) throw new Error(`artifact ${ref.sha256}: unexpected range answer`);
      out.set(part, off);
      off += part.length;
      opts.onProgress?.(off, ref.size);
    }
    return out;
  }
  getEvents(id: string, opts: { after?: number; limit?: number } = {}): Promise<EventsPage> {
    const q = new URLSearchParams();
    if (opts.after !== undefined) q.set("after", String(opts.after));
    if (opts.limit !== undefined) q.set("limit", String(opts.limit));
    const qs = q.toString();
    return this.json("GET", `/api/sessions/${encodeURIComponent(id)}/events${qs ? "?" + qs : ""}`);
  }
  /** The SSE URL of a session's events (for EventSource, which cannot send headers). */
  eventsStreamUrl(id: string, after = 0): string {
    const q = new URLSearchParams({ after: String(after) });
    if (this.apiKey) q.set("access_token", this.apiKey);
    return this.url(`/api/sessions/${encodeURIComponent(id)}/events?${q.toString()}`);
  }
  deleteSession(id: string, opts: { purge?: boolean } = {}): Promise<SessionSuccess> {
    return this.json("DELETE", `/api/sessions/${encodeURIComponent(id)}${opts.purge ? "?purge=true" : ""}`);
  }
  // ---- identity (docs/api.md, Auth) ----------------------------------------

  /** The authenticated user, its credential (scopes, expiry) and budgets. */
  me(): Promise<Me> {
    return this.json("GET", "/api/me");
  }
  /** Every user (admins). */
  async listUsers(): Promise<User[]> {
    return (await this.json<{ users: User[] }>("GET", "/api/users")).users;
  }
  /** Makes a user (admins). */
  createUser(user: NewUser): Promise<User> {
    return this.json("POST", "/api/users", user);
  }
  /** A user: yourself, or any for admins. */
  getUser(id: string): Promise<User> {
    return this.json("GET", `/api/users/${encodeURIComponent(id)}`);
  }
  /** Changes a user (admins); disabling one closes its open connections. */
  updateUser(id: string, update: UserUpdate): Promise<User> {
    return this.json("PATCH", `/api/users/${encodeURIComponent(id)}`, update);
  }
  /** Makes an API token; the answer's `token` is the only copy of the secret. */
  createToken(req: NewToken = {}): Promise<CreatedToken> {
    return this.json("POST", "/api/tokens", req);
  }
  /** Your tokens; admins: {user: id} for a user's, {user: "*"} for all. */
  async listTokens(opts: { user?: string } = {}): Promise<APIToken[]> {
    const q = opts.user !== undefined ? `?${new URLSearchParams({ user: opts.user }).toString()}` : "";
    return (await this.json<{ tokens: APIToken[] }>("GET", `/api/tokens${q}`)).tokens;
  }
  /** Revokes a token: it stops working at once, its open connections too. */
  revokeToken(id: string): Promise<APIToken> {
    return this.json("DELETE", `/api/tokens/${encodeURIComponent(id)}`);
  }
  /** Who a session is shared with (its owner, admins). */
  async listShares(sessionId: string): Promise<Share[]> {
    return (await this.json<{ shares: Share[] }>("GET", `/api/sessions/${encodeURIComponent(sessionId)}/shares`)).shares;
  }
  /** Shares a session with a user, to read or to control. */
  putShare(sessionId: string, userId: string, access: ShareAccess): Promise<Share> {
    return this.json("PUT", `/api/sessions/${encodeURIComponent(sessionId)}/shares/${encodeURIComponent(userId)}`, { access });
  }
  /** Stops sharing a session with a user. */
  deleteShare(sessionId: string, userId: string): Promise<{ success: boolean }> {
    return this.json("DELETE", `/api/sessions/${encodeURIComponent(sessionId)}/shares/${encodeURIComponent(userId)}`);
  }
  /** The provider keys a user or tenant stored (never the keys themselves). */
  async listProviderKeys(scope: OwnerScope, owner: string): Promise<ProviderKey[]> {
    return (await this.json<{ keys: ProviderKey[] }>("GET", `/api/keys/${scope}/${encodeURIComponent(owner)}`)).keys;
  }
  /** Stores a provider key (sealed with the server key; write-only). */
  putProviderKey(scope: OwnerScope, owner: string, provider: string, key: string): Promise<ProviderKey> {
    return this.json("PUT", `/api/keys/${scope}/${encodeURIComponent(owner)}/${encodeURIComponent(provider)}`, { key });
  }
  deleteProviderKey(scope: OwnerScope, owner: string, provider: string): Promise<{ success: boolean }> {
    return this.json("DELETE", `/api/keys/${scope}/${encodeURIComponent(owner)}/${encodeURIComponent(provider)}`);
  }
  /** The budgets set for users and tenants (admins). */
  async listBudgets(): Promise<Budget[]> {
    return (await this.json<{ budgets: Budget[] }>("GET", "/api/budgets")).budgets;
  }
  /** A user's or tenant's budget and use today and this month. */
  getBudget(scope: OwnerScope, owner: string): Promise<BudgetReport> {
    return this.json("GET", `/api/budgets/${scope}/${encodeURIComponent(owner)}`);
  }
  /** Sets a user's or tenant's budget (admins); limits left out are none. */
  putBudget(scope: OwnerScope, owner: string, limits: Omit<Budget, "scope" | "owner">): Promise<Budget> {
    return this.json("PUT", `/api/budgets/${scope}/${encodeURIComponent(owner)}`, { ...limits, scope, owner });
  }
  /** Removes a budget: the server's default applies again (admins). */
  deleteBudget(scope: OwnerScope, owner: string): Promise<{ success: boolean }> {
    return this.json("DELETE", `/api/budgets/${scope}/${encodeURIComponent(owner)}`);
  }
  /** Access records (refusals, identity changes) with id > after (admins). */
  accessLog(opts: { after?: number; limit?: number } = {}): Promise<AccessPage> {
    const q = new URLSearchParams();
    if (opts.after !== undefined) q.set("after", String(opts.after));
    if (opts.limit !== undefined) q.set("limit", String(opts.limit));
    const qs = q.toString();
    return this.json("GET", `/api/access-log${qs ? "?" + qs : ""}`);
  }
  /** Exchanges an OIDC authorization code (PKCE) for a bearer token. Needs no key. */
  oidcToken(code: string, codeVerifier: string, redirectUri: string): Promise<SignIn> {
    return this.json("POST", "/api/auth/oidc/token", { code, codeVerifier, redirectUri });
  }
  /** Trades an OIDC refresh token for a new bearer token. Needs no key. */
  oidcRefresh(refreshToken: string): Promise<SignIn> {
    return this.json("POST", "/api/auth/oidc/refresh", { refreshToken });
  }
  openapi(): Promise<{ [key: string]: Json }> {
    return this.json("GET", "/api/openapi.json");
  }
  async metrics(): Promise<string> {
    return (await this.request("GET", "/metrics", undefined, { Accept: "text/plain" })).text();
  }
}

async function errorFrom(res: Response): Promise<AgentdError> {
  let code = "HTTP_" + res.status;
  let message = `${res.status} ${res.statusText}`;
  try {
    const text = await res.text();
    try {
      const body = JSON.parse(text) as { error?: unknown; code?: unknown };
      if (typeof body.code === "string") code = body.code;
      if (typeof body.error === "string") message = body.error;
    } catch {
      if (text) message = text.slice(0, 500);
    }
  } catch {
    // body unreadable: keep the status line
  }
  return new AgentdError(res.status, code, message);
}
