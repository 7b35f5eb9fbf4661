// Wire types of agentd, mirroring the Go package conversation (block.go,
// event.go, status.go, reducer.go) and docs/api.md. Field names are the JSON
// names; optional fields are the ones Go omits when empty.

/** JSON value as carried by `input`, `updatedInput`, `data` and `metadata`. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

// ---- blocks -----------------------------------------------------------------

export const BLOCK_TYPES = [
  "user_message",
  "assistant_text",
  "thinking",
  "tool_use",
  "tool_result",
  "system",
  "subagent",
  "error",
  "skill_load",
] as const;
export type BlockType = (typeof BLOCK_TYPES)[number];

export const BLOCK_STATUSES = ["pending", "complete", "error"] as const;
export type BlockStatus = (typeof BLOCK_STATUSES)[number];

/**
 * Fields every block has. In a block:upsert only id and type are always
 * present; a block of a reduced conversation (GET /api/sessions/{id}, the
 * reducer's state) also has its timestamp (the event's, when the block set
 * none) and the fields its type requires (REQUIRED_FIELDS), empty or not.
 */
export interface BlockBase {
  id: string;
  type: BlockType;
  /** RFC 3339 time. */
  timestamp?: string;
  status?: BlockStatus;
  metadata?: { [key: string]: Json };
  /** Set when the block's text was longer than the server keeps: see Truncation. */
  truncated?: Truncation;
  /** Images and files the block carries, stored as artifacts. */
  attachments?: ArtifactRef[];
}

/** Content stored once in the session's artifact store (GET /api/sessions/{id}/artifacts/{sha256}). */
export interface ArtifactRef {
  sha256: string;
  size: number;
  contentType?: string;
  name?: string;
}

/**
 * A block whose text (`field`: "output" or "content") passed the server's
 * output limit: the field holds the text's first bytes, `tail` its last
 * ones, `totalBytes` its length (the bytes between are omitted); the whole
 * text is `artifact` once the block completes (`artifactError` when it
 * could not be stored). Fetch it, or a byte range of it, from the artifact.
 * `field` "input": a tool_use block's input JSON was longer than the limit;
 * `input` holds a bounded JSON of the same shape (long strings cut around
 * "\n… [N bytes omitted] …\n"), `totalBytes` is the full JSON's length,
 * `tail` is empty and `artifact` the full input (application/json).
 */
export interface Truncation {
  field: string;
  totalBytes: number;
  tail: string;
  artifact?: ArtifactRef;
  artifactError?: string;
}

export interface UserMessageBlock extends BlockBase {
  type: "user_message";
  content?: string;
}
export interface AssistantTextBlock extends BlockBase {
  type: "assistant_text";
  content?: string;
  model?: string;
}
export interface ThinkingBlock extends BlockBase {
  type: "thinking";
  content?: string;
  summary?: string;
}
export interface ToolUseBlock extends BlockBase {
  type: "tool_use";
  toolName?: string;
  toolUseId?: string;
  input?: Json;
  displayName?: string;
  description?: string;
}
export interface ToolResultBlock extends BlockBase {
  type: "tool_result";
  toolUseId?: string;
  output?: string;
  isError?: boolean;
  durationMs?: number;
}
export interface SystemBlock extends BlockBase {
  type: "system";
  subtype?: string;
  message?: string;
}
export interface SubagentBlock extends BlockBase {
  type: "subagent";
  subagentId?: string;
  toolUseId?: string;
  name?: string;
  input?: Json;
  description?: string;
  output?: string;
  durationMs?: number;
}
export interface ErrorBlock extends BlockBase {
  type: "error";
  message?: string;
  code?: string;
}
export interface SkillLoadBlock extends BlockBase {
  type: "skill_load";
  skillName?: string;
  content?: string;
}

export type Block =
  | UserMessageBlock
  | AssistantTextBlock
  | ThinkingBlock
  | ToolUseBlock
  | ToolResultBlock
  | SystemBlock
  | SubagentBlock
  | ErrorBlock
  | SkillLoadBlock;

/**
 * The fields each block type always has in a reduced conversation, as Go's
 * conversation.Required lists them. The reducer fills them in after every
 * upsert: "" for strings, false for isError, {} for a tool_use's input, ""
 * for a subagent's, "pending" for a status.
 */
export const REQUIRED_FIELDS: { readonly [T in BlockType]: readonly (keyof AnyBlock)[] } = {
  user_message: ["content"],
  assistant_text: ["content"],
  thinking: ["content"],
  tool_use: ["toolName", "toolUseId", "input", "status"],
  tool_result: ["toolUseId", "output", "isError"],
  system: ["subtype", "message"],
  subagent: ["subagentId", "input", "status"],
  error: ["message"],
  skill_load: ["skillName", "content"],
};

/** The flat union of every block field, as Go's Block struct holds it. */
export interface AnyBlock extends BlockBase {
  content?: string;
  model?: string;
  summary?: string;
  toolName?: string;
  toolUseId?: string;
  input?: Json;
  displayName?: string;
  description?: string;
  output?: string;
  isError?: boolean;
  durationMs?: number;
  subtype?: string;
  message?: string;
  code?: string;
  subagentId?: string;
  name?: string;
  skillName?: string;
}

/** The block id of the tool_result for a tool_use id. */
export function toolResultId(toolUseId: string): string {
  return toolUseId + "-result";
}

// ---- sessions ---------------------------------------------------------------

export const SESSION_STATUSES = [
  "created",
  "starting",
  "ready",
  "running",
  "idle",
  "terminated",
  "error",
] as const;
export type SessionStatus = (typeof SESSION_STATUSES)[number];

export interface Runtime {
  status: SessionStatus | "";
  architecture: string;
  sandbox?: string;
  agentVersion?: string;
  agentSessionId?: string;
  activeQueryId?: string;
  lastError?: string;
  /** The workspace root as the agent sees it. */
  workDir?: string;
  /** Messages waiting in the session's queue when the record was last saved. */
  queued?: number;
}

export interface Usage {
  inputTokens: number;
  outputTokens: number;
  cacheReadInputTokens?: number;
  cacheCreationInputTokens?: number;
}

// ---- events -----------------------------------------------------------------

export const EVENT_TYPES = [
  "block:upsert",
  "block:delta",
  "metadata:update",
  "status",
  "query:started",
  "query:completed",
  "query:failed",
  "permission:requested",
  "permission:resolved",
  "file:created",
  "file:modified",
  "file:deleted",
  "subagent:spawned",
  "subagent:completed",
  "error",
  "log",
  "session:idle",
  "message:queued",
  "message:dequeued",
  "message:cancelled",
  "options:update",
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

export const MAIN_CONVERSATION = "main";

export type Source = "runner" | "server" | "client";

export interface EventContext {
  sessionId: string;
  /** "main" or a subagent id (the parent tool_use id). */
  conversationId: string;
  source: Source;
  timestamp: string;
  /** The principal on whose behalf the event happened; null when none did. */
  actor: string | null;
}

export interface BlockUpsertPayload {
  block: AnyBlock;
}
export interface BlockDeltaPayload {
  blockId: string;
  delta: string;
}
export interface MetadataUpdatePayload {
  usage?: Usage;
  costUSD?: number;
  model?: string;
}
export interface StatusPayload {
  status: SessionStatus;
  runtime: Runtime;
  reason?: string;
}
export interface QueryStartedPayload {
  queryId: string;
  content?: string;
}
export interface QueryCompletedPayload {
  queryId: string;
  interrupted?: boolean;
  durationMs?: number;
  result?: string;
}
export interface QueryFailedPayload {
  queryId: string;
  error: string;
  code?: string;
  interrupted?: boolean;
  durationMs?: number;
}
export interface PermissionRequestedPayload {
  requestId: string;
  toolName: string;
  input: Json;
  toolUseId?: string;
  /** RFC 3339 time after which the request is denied by timeout. */
  expiresAt: string;
}
export type PermissionBehavior = "allow" | "deny";
export type ResolvedBy = "user" | "policy" | "timeout" | "interrupt" | "rule";
/** How far a permission answer reaches: this request, or the tool for the rest of the session. */
export type PermissionScope = "once" | "session";
export interface PermissionResolvedPayload {
  requestId: string;
  behavior: PermissionBehavior;
  by: ResolvedBy;
  message?: string;
  updatedInput?: Json;
  /** The requested tool (on answers that add a rule, and decisions by a rule). */
  toolName?: string;
  scope?: PermissionScope;
}
export interface FileChangePayload {
  path: string;
  size?: number;
  sha256?: string;
}
export interface SubagentSpawnedPayload {
  toolUseId: string;
  agentId?: string;
  prompt: string;
  subagentType?: string;
  description?: string;
}
export interface SubagentCompletedPayload {
  toolUseId: string;
  agentId?: string;
  status: BlockStatus;
  output?: string;
  durationMs?: number;
}
export interface ErrorPayload {
  message: string;
  code?: string;
}
export type LogLevel = "debug" | "info" | "warn" | "error";
export interface LogPayload {
  level: LogLevel;
  message: string;
  data?: Json;
}
export type SessionIdlePayload = Record<string, never>;
export interface MessageQueuedPayload {
  messageId: string;
  content: string;
}
export interface MessageDequeuedPayload {
  messageId: string;
  queryId?: string;
}
export interface MessageCancelledPayload {
  messageId: string;
  reason?: string;
}

/** The session's options after a change (PATCH /api/sessions/{id}/options). */
export interface OptionsUpdatePayload {
  /** The whole set after the change. */
  sessionOptions: SessionOptions;
  /** The keys the change set or removed. */
  changed?: string[];
}

/** Maps each event type to its payload type. */
export interface PayloadMap {
  "block:upsert": BlockUpsertPayload;
  "block:delta": BlockDeltaPayload;
  "metadata:update": MetadataUpdatePayload;
  status: StatusPayload;
  "query:started": QueryStartedPayload;
  "query:completed": QueryCompletedPayload;
  "query:failed": QueryFailedPayload;
  "permission:requested": PermissionRequestedPayload;
  "permission:resolved": PermissionResolvedPayload;
  "file:created": FileChangePayload;
  "file:modified": FileChangePayload;
  "file:deleted": FileChangePayload;
  "subagent:spawned": SubagentSpawnedPayload;
  "subagent:completed": SubagentCompletedPayload;
  error: ErrorPayload;
  log: LogPayload;
  "session:idle": SessionIdlePayload;
  "message:queued": MessageQueuedPayload;
  "message:dequeued": MessageDequeuedPayload;
  "message:cancelled": MessageCancelledPayload;
  "options:update": OptionsUpdatePayload;
}

/** The envelope of one event type. */
export interface EventOf<T extends EventType> {
  /** 1, 2, 3, … per session; 0 only for unsequenced events. */
  seq: number;
  type: T;
  payload: PayloadMap[T];
  context: EventContext;
}

/** The envelope every transport carries: a union discriminated by `type`. */
export type AgentEvent = { [T in EventType]: EventOf<T> }[EventType];

// ---- reduced state ----------------------------------------------------------

/** A subagent's conversation; id is the conversationId of its events. */
export interface Subagent {
  id: string;
  toolUseId: string;
  agentId?: string;
  subagentType?: string;
  description?: string;
  prompt?: string;
  status: BlockStatus;
  output?: string;
  durationMs?: number;
  blocks: readonly AnyBlock[];
}

export interface WorkspaceFile {
  path: string;
  size?: number;
  sha256?: string;
}

export type TurnStatus = "running" | "completed" | "failed";

/**
 * One query:started and how it ended (from its query:completed or
 * query:failed payload; a running turn has no outcome fields).
 */
export interface Turn {
  queryId: string;
  status: TurnStatus;
  interrupted?: boolean;
  error?: string;
  code?: string;
  durationMs?: number;
  result?: string;
  /** When the turn started (its query:started timestamp). */
  startedAt?: string;
  /** The usage reported while the turn ran. */
  usage?: Usage;
  /** The number of main-conversation blocks when the turn ended: its outcome belongs after them. Absent means 0. */
  afterBlock?: number;
}

/** A message waiting in the session's queue for its turn. */
export interface QueuedMessage {
  id: string;
  content: string;
  queuedAt?: string;
  /** The principal who sent it. */
  actor?: string;
  /** The message's images (no name) and files (named). */
  attachments?: ArtifactRef[];
}

/** A session rule: later permission requests for toolName are answered without asking. */
export interface PermissionRule {
  toolName: string;
  behavior: PermissionBehavior;
}

/** What the Go reducer's State holds (GET /api/sessions/{id} adds session fields). */
export interface ReducedState {
  status: SessionStatus | "";
  runtime: Runtime;
  blocks: readonly AnyBlock[];
  subagents: readonly Subagent[];
  usage: Usage;
  costUSD: number;
  model?: string;
  pendingPermissions: readonly PermissionRequestedPayload[];
  workspaceFiles: readonly WorkspaceFile[];
  activeQueryId?: string;
  /** One entry per query:started, in log order. */
  turns: readonly Turn[];
  /** Messages waiting for their turn, in order. */
  queuedMessages: readonly QueuedMessage[];
  /** The session's "allow for this session" rules. */
  permissionRules: readonly PermissionRule[];
  /** The options the last options:update set (absent when none did). */
  sessionOptions?: SessionOptions | null;
  lastSeq: number;
}

// ---- REST shapes (docs/api.md) ------------------------------------------------

export interface ApiErrorBody {
  error: string;
  code: string;
}

export interface AgentProfileSummary {
  id: string;
  name: string;
  description: string;
}

export interface Architecture {
  name: string;
  aliases: string[];
  available: boolean;
  version?: string;
  /** Why the architecture is unavailable, when it is not. */
  problem?: string;
}

/** Session creation options; `model` picks the agent's model. */
export type SessionOptions = { [key: string]: Json };

export interface CreateSessionRequest {
  agentProfileRef?: string;
  architecture?: string;
  sessionOptions?: SessionOptions;
  name?: string;
}

export interface CreateSessionResponse {
  sessionId: string;
  /** The new session's status ("created"). */
  status: SessionStatus;
  runtime: Runtime;
  createdAt: string;
  sessionOptions: SessionOptions | null;
}

/** An item of GET /api/sessions and of the live `{"op":"sessions"}` frames. */
export interface SessionSummary {
  sessionId: string;
  /** The architecture. */
  type: string;
  agentProfileReference: string;
  name: string;
  status: SessionStatus;
  lastActivity: string;
  createdAt: string;
  lastSeq: number;
  /** The user who created the session, and their tenant (servers with users). */
  owner?: string;
  tenant?: string;
  /** Set on a live-list frame when the session was deleted. */
  deleted?: boolean;
}

/**
 * A workspace file of GET /api/sessions/{id}; with ?include=content its text
 * (bounded), or why it has none.
 */
export interface SessionFile extends WorkspaceFile {
  content?: string;
  contentOmitted?: "too_large" | "binary" | "total_limit" | "unreadable";
}

/** GET /api/sessions/{id}. */
export interface SessionState extends ReducedState {
  workspaceFiles: readonly SessionFile[];
  sessionId: string;
  type: string;
  agentProfileReference: string;
  name: string;
  createdAt: string;
  lastActivity: string;
  sessionOptions: SessionOptions | null;
  /** Index of blocks[0] in the main conversation (blocks are its last ones, a page). */
  blockOffset: number;
  /** Blocks of the main conversation. */
  totalBlocks: number;
  /** Blocks come before blocks[0]: getSession(id, {before: blocks[0].id}) returns them. */
  hasMore: boolean;
}

/**
 * One part of a message's content (POST …/messages with content as a
 * list): text; an image as base64 data (source), a data: URL (url) or an
 * artifact the session holds (artifact: its sha256); a file (name: a
 * workspace path, with base64 data or an artifact), written into the
 * workspace before the turn. Images: png, jpeg, gif, webp.
 */
export type ContentPart =
  | { type: "text"; text: string }
  | { type: "image"; source: { type: "base64"; mediaType: string; data: string } }
  | { type: "image"; url: string }
  | { type: "image"; artifact: string }
  | { type: "file"; name: string; data: string; mediaType?: string }
  | { type: "file"; name: string; artifact: string; mediaType?: string };

export interface SendMessageResponse {
  success: true;
  sessionId: string;
  /** The turn the message started (absent when it was queued). */
  queryId?: string;
  /** Set when the message waits in the session's queue. */
  queued?: boolean;
  messageId?: string;
}

export interface PermissionAnswer {
  behavior: PermissionBehavior;
  message?: string;
  updatedInput?: Json;
  /** "session" (with allow): also allow every later request for this tool in the session. */
  scope?: PermissionScope;
}

/** A file's content in a workspace snapshot; sha256 is absent when it was not kept. */
export interface FileVersion {
  sha256?: string;
  size: number;
}

export interface ChangedFile {
  path: string;
  change: "added" | "modified" | "deleted";
  before?: FileVersion;
  after?: FileVersion;
}

export interface TurnChanges {
  queryId: string;
  files: ChangedFile[];
}

/** GET /api/sessions/{id}/changes. */
export interface SessionChanges {
  turns: TurnChanges[];
  overall: ChangedFile[];
}

export interface FileEntry {
  path: string;
  size: number;
  isDir: boolean;
  modTime: string;
  /** Unix permission bits. */
  mode: number;
}

/** DELETE /api/sessions/{id}. */
export interface SessionSuccess {
  success: boolean;
  sessionId: string;
}

/** PATCH /api/sessions/{id}/options: the session's options after the change. */
export interface UpdateOptionsResponse {
  success: boolean;
  sessionId: string;
  sessionOptions: SessionOptions | null;
}

/** What POST /api/sessions/{id}/sync did with the workspace's copies in the store. */
export interface SyncFiles {
  saved: number;
  deleted: number;
  unchanged: number;
  /** Files larger than the server's copy bound (not copied). */
  skipped: number;
}

/** POST /api/sessions/{id}/sync. */
export interface SyncResponse {
  success: boolean;
  sessionId: string;
  files: SyncFiles;
  /** The agent transcripts the store holds. */
  transcripts: string[];
}

/** POST /api/sessions/{id}/environment/terminate. */
export interface TerminateEnvironmentResponse {
  success: boolean;
  sessionId: string;
  runtime: Runtime;
}

export interface EventsPage {
  events: AgentEvent[];
  lastSeq: number;
}

// ---- identity (docs/api.md, Auth) -------------------------------------------

/** GET /api/auth: whether and how to authenticate. */
export interface AuthInfo {
  required: boolean;
  /** "token" (an API token or the server's --api-key) and "oidc" (sign in at the provider). */
  methods?: string[];
  oidc?: OIDCInfo;
  /** The server keeps users (tokens, ownership, shares, per-user keys and budgets). */
  multiUser?: boolean;
}

/** The OpenID Connect provider a UI signs in at (authorization code with PKCE). */
export interface OIDCInfo {
  issuer: string;
  clientId: string;
  /** Absent when the server could not reach the provider. */
  authorizationEndpoint?: string;
  scopes: string[];
}

export type Role = "admin" | "member";

export interface User {
  id: string;
  name?: string;
  tenant: string;
  role: Role;
  /** The OIDC identity of a user made on first sign-in. */
  issuer?: string;
  subject?: string;
  disabled?: boolean;
  createdAt: string;
}

/** POST /api/users (admins). */
export interface NewUser {
  id: string;
  name?: string;
  tenant?: string;
  role?: Role;
}

/** PATCH /api/users/{id} (admins): the fields set change. */
export interface UserUpdate {
  name?: string;
  tenant?: string;
  role?: Role;
  /** Disabling cuts off the user's open connections. */
  disabled?: boolean;
}

export interface APIToken {
  id: string;
  userId: string;
  name?: string;
  scopes: string[];
  createdAt: string;
  expiresAt?: string;
  lastUsedAt?: string;
  revokedAt?: string;
}

/** POST /api/tokens. */
export interface NewToken {
  /** Whose token (default: the caller; others: admins only). */
  userId?: string;
  name?: string;
  scopes?: string[];
  /** Lifetime in seconds (absent or 0: never expires). */
  expiresIn?: number;
}

/** A new token: `token` is the secret, shown in this answer only. */
export interface CreatedToken extends APIToken {
  token: string;
}

export type ShareAccess = "read" | "control";

export interface Share {
  sessionId: string;
  userId: string;
  access: ShareAccess;
  createdAt: string;
}

export type OwnerScope = "user" | "tenant";

/** A stored provider key, without the key (never returned). */
export interface ProviderKey {
  scope: OwnerScope;
  owner: string;
  provider: string;
  /** The key's last characters. */
  hint?: string;
  createdAt: string;
}

/** A user's or tenant's limits; absent or 0: no limit. */
export interface Budget {
  scope: OwnerScope;
  owner: string;
  tokensPerDay?: number;
  tokensPerMonth?: number;
  costPerDayMicros?: number;
  costPerMonthMicros?: number;
}

export interface BudgetUsage {
  tokens: number;
  costMicros: number;
}

/** A budget and the use against it today and this month (UTC). */
export interface BudgetReport {
  budget: Budget;
  day: BudgetUsage;
  month: BudgetUsage;
}

/** GET /api/me. */
export interface Me {
  user: User;
  /** How the caller authenticated: "token", "api-key", "oidc", "none"… */
  method: string;
  tokenId?: string;
  scopes: string[];
  admin: boolean;
  /** When the credential stops working (absent: never). */
  expiresAt?: string;
  budget?: BudgetReport;
  tenantBudget?: BudgetReport;
}

/** A refusal or identity change (GET /api/access-log, admins). */
export interface AccessRecord {
  id: number;
  time: string;
  kind: string;
  actor?: string;
  tokenId?: string;
  subject?: string;
  detail?: string;
}

export interface AccessPage {
  records: AccessRecord[];
  /** The last record's id: pass it as `after` for the next page. */
  last: number;
}

/** POST /api/auth/oidc/token and /refresh: a bearer token for the UI. */
export interface SignIn {
  token: string;
  expiresAt: string;
  refreshToken?: string;
  user: User;
}
