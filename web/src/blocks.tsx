// Views of conversation blocks. Each view is memoized on the block object:
// the reducer replaces a block only when it changes, so a delta re-renders
// exactly one block, once per animation frame.
import { createContext, memo, useContext, useLayoutEffect, useMemo, useRef, useState, type ReactNode } from "react";
import type { AnyBlock, Json, Notice, Subagent, Turn } from "@agentd/client";
import { diffLines, editsOf, type FileEdit } from "./diff";
import { Markdown, CopyButton } from "./markdown";
import { stats } from "./app-context";
import { ansiNodes, stripAnsi } from "./lib/ansi";
import { highlightLines, languageOf, useHighlighter } from "./lib/highlight";
import { Attachments, TruncatedInputNote, TruncatedText, inputTruncationOf, truncationOf } from "./Attachments";

const SHELL_TOOLS = new Set(["bash", "shell", "exec", "exec_command", "run_shell_command", "command", "local_shell"]);
const OUTPUT_CAP = 256 * 1024; // characters of tool output shown before "show all"
/** Outputs longer than this many lines start collapsed to their last PREVIEW_LINES. */
const LONG_OUTPUT = 20;
const PREVIEW_LINES = 10;
/** Diffs longer than this start collapsed. */
const LONG_DIFF = 60;

/** What the views of one session share: where its workspace is, how to resend a message. */
export interface SessionInfo {
  sessionId: string;
  /** The workspace root as the agent sees it (absolute), when known. */
  workDir?: string | undefined;
  /** Sends a message again (Retry of a failed turn); undefined when the view is read-only. */
  resend?: ((content: string) => void) | undefined;
}

export const SessionInfoContext = createContext<SessionInfo>({ sessionId: "" });

function countRender(id: string): void {
  stats.blockRenders.set(id, (stats.blockRenders.get(id) ?? 0) + 1);
}

/**
 * A path as the user thinks of it: relative to the workspace when it is
 * inside it (agents use absolute paths), else as given.
 */
export function relPath(p: string, info: Pick<SessionInfo, "sessionId" | "workDir">): string {
  const root = info.workDir?.replace(/\/+$/, "");
  if (root && p.startsWith(root + "/")) return p.slice(root.length + 1);
  if (root && p === root) return ".";
  if (info.sessionId) {
    const marker = `/workspaces/${info.sessionId}/`;
    const i = p.indexOf(marker);
    if (i >= 0) return p.slice(i + marker.length);
  }
  return p;
}

/** The shell command of a tool call, if it is one. */
export function commandOf(b: AnyBlock): string | null {
  const input = b.input;
  if (!input || typeof input !== "object" || Array.isArray(input)) return null;
  const o = input as Record<string, Json>;
  const cmd = o.command ?? o.cmd;
  if (typeof cmd === "string" && (SHELL_TOOLS.has((b.toolName ?? "").toLowerCase()) || !b.toolName)) return cmd;
  if (Array.isArray(cmd) && cmd.every((c) => typeof c === "string")) return (cmd as string[]).join(" ");
  if (typeof cmd === "string") return cmd;
  return null;
}

/** A one-line summary of a tool input: its path, pattern, URL or description. */
export function inputSummary(input: Json | undefined, info: Pick<SessionInfo, "sessionId" | "workDir">): string {
  if (!input || typeof input !== "object" || Array.isArray(input)) return "";
  const o = input as Record<string, Json>;
  for (const k of ["file_path", "filePath", "path", "notebook_path", "absolute_path"]) {
    const v = o[k];
    if (typeof v === "string" && v) return relPath(v, info);
  }
  for (const k of ["pattern", "query", "url", "skill", "description", "prompt"]) {
    const v = o[k];
    if (typeof v === "string" && v) return v.split("\n")[0]!.slice(0, 200);
  }
  return "";
}

function StatusDot({ status }: { status: AnyBlock["status"] }) {
  const label = status === "pending" ? "running" : status === "error" ? "failed" : status === "complete" ? "done" : "";
  if (!label) return null;
  return <span className={`dot dot-${status}`} role="img" aria-label={label} title={label} />;
}

const CHUNK_LINES = 200;

/** Splits text into chunks of CHUNK_LINES lines; every chunk but the last ends with "\n". */
export function chunkLines(text: string): string[] {
  const out: string[] = [];
  let start = 0;
  let lines = 0;
  for (let i = text.indexOf("\n"); i >= 0; i = text.indexOf("\n", i + 1)) {
    if (++lines === CHUNK_LINES) {
      out.push(text.slice(start, i + 1));
      start = i + 1;
      lines = 0;
    }
  }
  if (start < text.length || out.length === 0) out.push(text.slice(start));
  return out;
}

/** The number of lines of text (a final newline ends the last line). */
export function lineCount(text: string): number {
  if (!text) return 0;
  let n = 0;
  for (let i = text.indexOf("\n"); i >= 0; i = text.indexOf("\n", i + 1)) n++;
  return text.endsWith("\n") ? n : n + 1;
}

/** The last n lines of text. */
function tailLines(text: string, n: number): string {
  let end = text.endsWith("\n") ? text.length - 1 : text.length;
  let i = end;
  for (let k = 0; k < n; k++) {
    i = text.lastIndexOf("\n", i - 1);
    if (i < 0) return text;
  }
  return text.slice(i + 1, end + 1);
}

// A finished chunk never changes, so while output streams only the last
// chunk's text node is replaced: layout work per frame stays small however
// long the output grows.
const Chunk = memo(function Chunk({ text }: { text: string }) {
  return <span>{ansiNodes(text)}</span>;
});

export function TerminalOutput({ text, isError, testId, collapsible = true }: { text: string; isError?: boolean | undefined; testId?: string; collapsible?: boolean }) {
  const [all, setAll] = useState(false);
  const [expanded, setExpanded] = useState(false);
  const pre = useRef<HTMLPreElement>(null);
  const pinned = useRef(true);
  const lines = useMemo(() => lineCount(text), [text]);
  const collapsed = collapsible && !expanded && lines > LONG_OUTPUT;
  const cut = !collapsed && !all && text.length > OUTPUT_CAP;
  // Cut at a line start so chunk boundaries stay stable as more text arrives.
  const shown = collapsed ? tailLines(text, PREVIEW_LINES) : cut ? text.slice(text.indexOf("\n", text.length - OUTPUT_CAP) + 1) : text;
  const chunks = useMemo(() => chunkLines(shown), [shown]);
  // Like a terminal: keep showing the newest output unless the reader scrolled up.
  useLayoutEffect(() => {
    const el = pre.current;
    if (el && pinned.current) el.scrollTop = el.scrollHeight;
  }, [text, expanded]);
  return (
    <div className="term-wrap">
      {collapsed && (
        <button type="button" className="linkish expander" data-testid="expand-output" aria-expanded={false} onClick={() => setExpanded(true)}>
          ▸ Show all {lines.toLocaleString()} lines <span className="muted">(the last {PREVIEW_LINES} are shown)</span>
        </button>
      )}
      {collapsible && expanded && lines > LONG_OUTPUT && (
        <button type="button" className="linkish expander" data-testid="collapse-output" aria-expanded={true} onClick={() => setExpanded(false)}>
          ▾ Collapse {lines.toLocaleString()} lines
        </button>
      )}
      {cut && (
        <button type="button" className="linkish" onClick={() => setAll(true)}>
          Show all output ({Math.round(text.length / 1024)} KB; the last {OUTPUT_CAP / 1024} KB are shown)
        </button>
      )}
      <pre
        ref={pre}
        className={`terminal${isError ? " is-error" : ""}${text ? "" : " empty"}`}
        data-testid={testId}
        data-lines={lines}
        data-collapsed={collapsed || undefined}
        tabIndex={text ? 0 : undefined}
        onScroll={(e) => {
          const el = e.currentTarget;
          pinned.current = el.scrollHeight - el.scrollTop - el.clientHeight < 8;
        }}
      >
        {chunks.map((c, i) => (
          <Chunk key={i} text={c} />
        ))}
      </pre>
    </div>
  );
}

/**
 * A tool result's output: as TerminalOutput, or, when the server kept it
 * as head + tail (block.truncated), both with the bytes omitted between
 * and "Show all"; then the images the tool returned.
 */
function ResultOutput({ result, testId = "tool-output", collapsible = true }: { result: AnyBlock; testId?: string; collapsible?: boolean }) {
  const output = result.output ?? "";
  const t = truncationOf(result, "output");
  return (
    <>
      {t ? (
        <TruncatedText
          head={output}
          truncation={t}
          render={(text, part) => <TerminalOutput text={text} isError={result.isError} testId={part === "full" ? testId : `${testId}-${part}`} collapsible={part === "full" && collapsible} />}
        />
      ) : (
        <TerminalOutput text={output} isError={result.isError} testId={testId} collapsible={collapsible} />
      )}
      <Attachments refs={result.attachments} label="Tool result image" />
    </>
  );
}

/** A code listing with line numbers and syntax highlighting. */
export function CodeView({ text, path, testId, start = 1 }: { text: string; path?: string | undefined; testId?: string; start?: number }) {
  const hl = useHighlighter();
  const lang = languageOf(path);
  const plain = useMemo(() => {
    const l = text.split("\n");
    if (text.endsWith("\n")) l.pop();
    return l;
  }, [text]);
  const coloured = useMemo(() => highlightLines(hl, text, lang), [hl, text, lang]);
  const width = String(start + plain.length).length;
  return (
    <pre className="code-view hljs" data-testid={testId} data-lang={lang || undefined}>
      {plain.map((l, i) => (
        <div key={i} className="code-line">
          <span className="ln" aria-hidden="true" style={{ width: `${width + 1}ch` }}>
            {start + i}
          </span>
          <span className="code-text">{coloured?.[i] ?? (l || " ")}</span>
        </div>
      ))}
    </pre>
  );
}

export function DiffView({ edit, notApplied, testId = "diff" }: { edit: FileEdit; notApplied?: boolean; testId?: string }) {
  const info = useContext(SessionInfoContext);
  const hl = useHighlighter();
  const lines = useMemo(() => diffLines(edit.oldText, edit.newText), [edit.oldText, edit.newText]);
  const [open, setOpen] = useState(lines.length <= LONG_DIFF);
  const lang = languageOf(edit.path);
  // Line numbers are the file's own for a whole file (a Write, a file of the
  // changes view); an Edit's snippet has none to show.
  const numbered = edit.whole || edit.oldText === "";
  // Highlight each side as a whole (keeps multi-line strings and comments
  // right), then pick each diff line's colouring by its line number.
  const oldHl = useMemo(() => highlightLines(hl, edit.oldText, lang), [hl, edit.oldText, lang]);
  const newHl = useMemo(() => highlightLines(hl, edit.newText, lang), [hl, edit.newText, lang]);
  const added = lines.filter((l) => l.op === "+").length;
  const removed = lines.filter((l) => l.op === "-").length;
  let o = 0;
  let n = 0;
  const rows: ReactNode[] = [];
  const shown = open ? lines : lines.slice(0, LONG_DIFF / 2);
  for (let i = 0; i < shown.length; i++) {
    const l = shown[i]!;
    const oldNo = l.op === "+" ? "" : String(o + 1);
    const newNo = l.op === "-" ? "" : String(n + 1);
    const body = l.op === "-" ? oldHl?.[o] : newHl?.[n];
    if (l.op !== "+") o++;
    if (l.op !== "-") n++;
    rows.push(
      <div key={i} className={l.op === "+" ? "add" : l.op === "-" ? "del" : "ctx"}>
        {numbered && (
          <>
            <span className="ln" aria-hidden="true">
              {oldNo}
            </span>
            <span className="ln" aria-hidden="true">
              {newNo}
            </span>
          </>
        )}
        <span className="gutter" aria-hidden="true">
          {l.op}
        </span>
        <span className="sr-only">{l.op === "+" ? "added: " : l.op === "-" ? "removed: " : ""}</span>
        <span className="code-text">{body && !notApplied ? body : l.text || " "}</span>
      </div>,
    );
  }
  return (
    <div className={`diff hljs${notApplied ? " not-applied" : ""}`} data-testid={testId} data-not-applied={notApplied || undefined}>
      {edit.path && (
        <div className="diff-path">
          <span>{relPath(edit.path, info)}</span>
          <span className="diff-stat">
            {notApplied ? (
              <span className="badge badge-muted" data-testid="not-applied">
                not applied
              </span>
            ) : (
              <>
                <span className="plus">+{added}</span> <span className="minus">−{removed}</span>
              </>
            )}
          </span>
        </div>
      )}
      <pre>{rows}</pre>
      {lines.length > LONG_DIFF && (
        <button type="button" className="linkish expander" aria-expanded={open} onClick={() => setOpen(!open)}>
          {open ? "▾ Collapse the diff" : `▸ Show all ${lines.length} lines of the diff`}
        </button>
      )}
    </div>
  );
}

function JsonView({ value }: { value: Json | undefined }) {
  if (value === undefined) return null;
  return <pre className="json">{JSON.stringify(value, null, 2)}</pre>;
}

/** A tool input as the user reads it: a diff, a command, a path, or JSON. */
export function ToolInput({ toolName, input, notApplied, inHeader }: { toolName?: string | undefined; input: Json | undefined; notApplied?: boolean; inHeader?: boolean }) {
  const info = useContext(SessionInfoContext);
  const b = { id: "", type: "tool_use" as const, toolName, input };
  const cmd = commandOf(b as AnyBlock);
  if (cmd !== null)
    return (
      <pre className="terminal cmd" data-testid="tool-command">
        <span className="prompt" aria-hidden="true">
          ${" "}
        </span>
        {cmd}
      </pre>
    );
  const edits = editsOf(input);
  if (edits)
    return (
      <>
        {edits.map((e, i) => (
          <DiffView key={i} edit={e} notApplied={notApplied} />
        ))}
      </>
    );
  const summary = inputSummary(input, info);
  const o = input && typeof input === "object" && !Array.isArray(input) ? (input as Record<string, Json>) : null;
  const simple = o && Object.keys(o).length <= 2 && summary;
  return (
    <>
      {summary && !inHeader && (
        <div className="tool-summary" data-testid="tool-input-summary">
          {summary}
        </div>
      )}
      {!simple && (
        <details className="tool-input">
          <summary>Input</summary>
          <JsonView value={input} />
        </details>
      )}
    </>
  );
}

interface ToolProps {
  block: AnyBlock;
  result: AnyBlock | undefined;
  sub: Subagent | undefined;
  awaiting?: boolean | undefined;
}

/** Tools whose output is a listing to glance at: collapsed until asked for. */
const QUIET_TOOLS = new Set(["read", "glob", "grep", "ls", "list", "webfetch", "websearch", "read_file", "list_directory", "search_file_content", "glob_tool", "todowrite", "todoread"]);

function exitCodeOf(result: AnyBlock | undefined): number | null {
  const v = result?.metadata?.exitCode;
  return typeof v === "number" ? v : null;
}

const ToolUseView = memo(function ToolUseView({ block: logged, result, sub, awaiting }: ToolProps) {
  countRender(logged.id);
  const info = useContext(SessionInfoContext);
  // An input the server bounded shows as it is, with a note loading the
  // whole one from its artifact; once loaded, the view shows that.
  const inputTrunc = inputTruncationOf(logged);
  const [full, setFull] = useState<{ sha256: string; input: Json } | null>(null);
  const fullInput = full && full.sha256 === inputTrunc?.artifact?.sha256 ? full.input : undefined;
  const block = fullInput !== undefined ? ({ ...logged, input: fullInput } as AnyBlock) : logged;
  const inputNote =
    inputTrunc && fullInput === undefined ? (
      <TruncatedInputNote truncation={inputTrunc} onFull={(input) => setFull({ sha256: inputTrunc.artifact?.sha256 ?? "", input })} />
    ) : null;
  const cmd = commandOf(block);
  const edits = cmd === null ? editsOf(block.input) : null;
  const quiet = QUIET_TOOLS.has((block.toolName ?? "").toLowerCase());
  // Quiet tools start collapsed, unless their result brought images:
  // those are worth seeing. A click decides from then on.
  const [picked, setOpen] = useState<boolean | null>(null);
  const open = picked ?? (!quiet || !!result?.attachments?.length);
  // A tool_use block is "complete" once its input is; the call itself is
  // done only when its result is there.
  const status = result ? (result.isError ? "error" : result.status ?? "complete") : block.status === "error" ? "error" : "pending";
  const title = block.displayName || block.toolName || "tool";
  const exit = exitCodeOf(result);
  const notApplied = !!edits && !!result?.isError;
  const output = result?.output ?? "";
  const outLines = lineCount(output);
  const summary = cmd !== null ? "" : inputSummary(block.input, info);
  const bodyId = `tool-body-${block.id}`;
  return (
    <div className={`block tool${result?.isError ? " is-error" : ""}${notApplied ? " not-applied" : ""}`} data-testid="block-tool_use" data-block-id={block.id} data-tool={block.toolName}>
      <div className="tool-head">
        <button type="button" className="tool-toggle" aria-expanded={open} aria-controls={bodyId} data-testid="tool-toggle" onClick={() => setOpen(!open)}>
          <span className="chev" aria-hidden="true">
            {open ? "▾" : "▸"}
          </span>
          <StatusDot status={status} />
          <span className="tool-name">{title}</span>
          {summary && <span className="tool-arg">{summary}</span>}
        </button>
        {block.description && <span className="muted tool-desc"> — {block.description}</span>}
        {result?.durationMs ? <span className="muted small"> {fmtMs(result.durationMs)}</span> : null}
        {exit !== null && exit !== 0 && (
          <span className="badge badge-error" data-testid="exit-code">
            exit {exit}
          </span>
        )}
        {notApplied && (
          <span className="badge badge-muted" data-testid="edit-denied">
            not applied
          </span>
        )}
        {!open && outLines > 0 && <span className="muted small">{outLines.toLocaleString()} lines</span>}
        {awaiting && !result ? (
          <span className="awaiting small" data-testid="awaiting-permission">
            awaiting permission
          </span>
        ) : null}
      </div>
      <div id={bodyId} hidden={!open}>
        {cmd !== null ? (
          <div className="shell">
            <ToolInput toolName={block.toolName} input={block.input} />
            {inputNote}
            {result && <ResultOutput result={result} />}
          </div>
        ) : edits ? (
          <>
            <ToolInput toolName={block.toolName} input={block.input} notApplied={notApplied} />
            {inputNote}
            {result && (result.isError || output.length > 0) && (
              <div className={notApplied ? "denied-reason" : ""}>
                {notApplied ? (
                  <ResultOutput result={result} collapsible={false} />
                ) : (
                  <details className="tool-result">
                    <summary>Result</summary>
                    <ResultOutput result={result} />
                  </details>
                )}
              </div>
            )}
          </>
        ) : (
          <>
            <ToolInput toolName={block.toolName} input={block.input} inHeader />
            {inputNote}
            {result && <ResultOutput result={result} />}
          </>
        )}
      </div>
      {sub && <SubagentThread sub={sub} />}
    </div>
  );
});

export function SubagentThread({ sub }: { sub: Subagent }) {
  const label = sub.description || sub.subagentType || "Subagent";
  // The thread usually starts with the prompt as a user message and ends with
  // the output as the last text: show each only once.
  const first = sub.blocks[0];
  const showPrompt = !!sub.prompt && !(first?.type === "user_message" && first.content === sub.prompt);
  const last = sub.blocks[sub.blocks.length - 1];
  const showOutput = !!sub.output && !(last?.type === "assistant_text" && last.content?.trim() === sub.output.trim());
  return (
    <details className="subagent" data-testid="subagent-thread" data-subagent-id={sub.id}>
      <summary>
        <StatusDot status={sub.status} /> {label}
        {sub.description && sub.subagentType ? <span className="muted small"> · {sub.subagentType}</span> : null}{" "}
        <span className="muted small">({sub.blocks.length} blocks{sub.durationMs ? `, ${fmtMs(sub.durationMs)}` : ""})</span>
      </summary>
      {showPrompt && <div className="sub-prompt">{sub.prompt}</div>}
      <div className="sub-blocks">
        <BlockList blocks={sub.blocks} subagents={[]} />
      </div>
      {showOutput && (
        <div className="sub-output" data-testid="subagent-output">
          <Markdown text={sub.output!} />
        </div>
      )}
    </details>
  );
}

/** A non-virtualized block list, for subagent threads. */
export function BlockList({ blocks, subagents }: { blocks: readonly AnyBlock[]; subagents: readonly Subagent[] }) {
  const items = buildItems(blocks, [], subagents);
  return (
    <>
      {items.map((it) => (
        <ItemView key={it.key} item={it} />
      ))}
    </>
  );
}

export const BlockView = memo(function BlockView({ block, sub }: { block: AnyBlock; sub?: Subagent | undefined }) {
  countRender(block.id);
  const common = { "data-block-id": block.id, "data-testid": `block-${block.type}` };
  switch (block.type) {
    case "user_message":
      return (
        <div className="block user" {...common}>
          {block.content ? <div className="bubble">{block.content}</div> : null}
          <Attachments refs={block.attachments} label="Image" />
        </div>
      );
    case "assistant_text":
      return (
        <div className="block assistant" {...common}>
          {truncationOf(block, "content") ? (
            <TruncatedText head={block.content ?? ""} truncation={truncationOf(block, "content")!} render={(text) => <Markdown text={text} />} />
          ) : (
            <Markdown text={block.content ?? ""} />
          )}
          {block.status !== "pending" && block.content ? (
            <div className="msg-actions">
              <CopyButton text={block.content} label="Copy message" />
            </div>
          ) : null}
        </div>
      );
    case "thinking":
      return (
        <details className="block thinking" {...common}>
          <summary>
            {block.status === "pending" ? "Thinking…" : "Thought"}
            {block.summary ? `: ${block.summary}` : ""}
          </summary>
          <div className="thinking-body">{block.content}</div>
        </details>
      );
    case "tool_result":
      return (
        <div className="block tool" {...common}>
          <ResultOutput result={block} />
        </div>
      );
    case "system":
      return (
        <div className="block system muted small" {...common}>
          {block.subtype ? `[${block.subtype}] ` : ""}
          {block.message}
        </div>
      );
    case "error":
      return (
        <div className="block error" role="alert" {...common}>
          <strong>Error{block.code && block.code !== "unknown" ? ` (${block.code})` : ""}:</strong> {block.message}
        </div>
      );
    case "skill_load":
      return (
        <details className="block skill" {...common}>
          <summary>Skill loaded: {block.skillName}</summary>
          <Markdown text={block.content ?? ""} />
        </details>
      );
    case "subagent":
      // A subagent block (Claude Code's Task/Agent call) holds its thread.
      if (sub)
        return (
          <div className="block subagent-block" {...common}>
            <SubagentThread sub={sub} />
          </div>
        );
      return (
        <div className="block subagent-block" {...common}>
          <details>
            <summary>
              <StatusDot status={block.status} /> {block.name || block.description || "Subagent"}
            </summary>
            {block.output && <Markdown text={block.output} />}
          </details>
        </div>
      );
    default:
      return (
        <div className="block unknown muted" {...common}>
          <JsonView value={block as unknown as Json} />
        </div>
      );
  }
});

/** A notice; a failed turn's carries the message to send again. */
export interface ShownNotice extends Notice {
  retry?: string;
}

export const NoticeView = memo(function NoticeView({ notice }: { notice: ShownNotice }) {
  const { resend } = useContext(SessionInfoContext);
  const failed = notice.kind === "turn_failed";
  const title = failed ? errorTitle(notice.code) : notice.kind === "turn_interrupted" ? "Turn interrupted" : "Error";
  return (
    <div className={`block notice notice-${notice.kind}`} role="alert" data-testid={`notice-${notice.kind}`}>
      <div className="notice-text">
        <strong>{title}</strong>
        {notice.message && notice.kind !== "turn_interrupted" ? `: ${notice.message}` : ""}
        {notice.code ? <span className="code-badge"> ({notice.code})</span> : null}
      </div>
      {failed && notice.retry !== undefined && resend && (
        <button type="button" className="retry" data-testid="retry-turn" onClick={() => resend(notice.retry!)}>
          ↻ Retry
        </button>
      )}
    </div>
  );
});

function errorTitle(code: string | undefined): string {
  switch (code) {
    case "MODEL_ERROR":
      return "Model error";
    case "AGENT_NOT_FOUND":
      return "Agent not installed";
    case "AGENT_EXITED":
      return "The agent stopped";
    case "SANDBOX_ERROR":
      return "Sandbox error";
    case "SERVER_RESTARTED":
      return "Server restarted";
    case "BUDGET_EXCEEDED":
      return "Budget used up";
    default:
      return "Turn failed";
  }
}

// ---- items: blocks with their results and threads attached ----------------

export type Item =
  | { key: string; kind: "block"; block: AnyBlock; sub?: Subagent }
  | { key: string; kind: "tool"; block: AnyBlock; result: AnyBlock | undefined; sub: Subagent | undefined; awaiting?: boolean }
  | { key: string; kind: "notice"; notice: ShownNotice }
  | { key: string; kind: "subagent"; sub: Subagent };

const sameError = (a: string | undefined, b: string | undefined) => {
  const x = (a ?? "").trim();
  const y = (b ?? "").trim();
  return x !== "" && y !== "" && (x === y || x.includes(y) || y.includes(x));
};

/**
 * One error per failed turn: the error blocks and error events inside a
 * failed turn that say what its failure says are folded into its notice,
 * which takes the most specific code, and gets the turn's message to send
 * again. Returns the notices to show and the ids of blocks to hide.
 */
export function mergeTurnErrors(
  blocks: readonly AnyBlock[],
  notices: readonly Notice[],
  turns: readonly Turn[],
): { notices: ShownNotice[]; hidden: Set<string> } {
  const hidden = new Set<string>();
  const out: ShownNotice[] = [];
  const index = new Map<string, number>();
  blocks.forEach((b, i) => index.set(b.id, i));
  const failed = new Map<string, { start: number; end: number; turn: Turn }>();
  let prevEnd = 0;
  for (const t of turns) {
    const end = t.afterBlock ?? 0;
    const userAt = index.get(`${t.queryId}-user`);
    const start = userAt ?? prevEnd;
    if (t.status === "failed" && !t.interrupted) failed.set(t.queryId, { start, end, turn: t });
    if (t.status !== "running") prevEnd = end;
  }
  const dropped = new Set<Notice>();
  for (const n of notices) {
    if (n.kind !== "turn_failed" || !n.queryId) continue;
    const f = failed.get(n.queryId);
    if (!f) continue;
    for (let i = f.start; i < f.end && i < blocks.length; i++) {
      const b = blocks[i]!;
      if (b.type === "error" && sameError(b.message, f.turn.error)) hidden.add(b.id);
    }
    for (const e of notices) {
      if (e.kind === "error" && e.afterBlock >= f.start && e.afterBlock <= f.end && sameError(e.message, f.turn.error)) dropped.add(e);
    }
  }
  for (const n of notices) {
    if (dropped.has(n)) continue;
    if (n.kind === "turn_failed" && n.queryId) {
      const user = blocks[index.get(`${n.queryId}-user`) ?? -1];
      const shown: ShownNotice = { ...n };
      if (user?.content) shown.retry = user.content;
      out.push(shown);
      continue;
    }
    out.push(n);
  }
  return { notices: out, hidden };
}

/**
 * Turns blocks into list items: a tool_result is shown inside its tool_use,
 * a subagent thread inside the tool call or subagent block that spawned it,
 * notices after the block they followed, and threads with no parent block
 * at the end. Blocks in hidden (errors a notice repeats) are left out.
 */
export function buildItems(
  blocks: readonly AnyBlock[],
  notices: readonly ShownNotice[],
  subagents: readonly Subagent[],
  awaitingPermission: ReadonlySet<string> = new Set(),
  hidden: ReadonlySet<string> = new Set(),
): Item[] {
  const toolUses = new Set<string>();
  for (const b of blocks) if (b.type === "tool_use") toolUses.add(b.toolUseId || b.id);
  const results = new Map<string, AnyBlock>();
  for (const b of blocks) if (b.type === "tool_result" && b.toolUseId && toolUses.has(b.toolUseId)) results.set(b.toolUseId, b);
  const subs = new Map<string, Subagent>();
  for (const s of subagents) subs.set(s.id, s);
  const placed = new Set<string>();
  const items: Item[] = [];
  let n = 0;
  const flushNotices = (upTo: number) => {
    while (n < notices.length && notices[n]!.afterBlock <= upTo) {
      const x = notices[n++]!;
      items.push({ key: `notice-${x.key}`, kind: "notice", notice: x });
    }
  };
  blocks.forEach((b, i) => {
    flushNotices(i);
    if (hidden.has(b.id)) return;
    if (b.type === "tool_result" && b.toolUseId && results.get(b.toolUseId) === b) return;
    if (b.type === "tool_use") {
      const id = b.toolUseId || b.id;
      const sub = subs.get(id);
      if (sub) placed.add(sub.id);
      const item: Item = { key: b.id, kind: "tool", block: b, result: results.get(id), sub };
      if (awaitingPermission.has(id)) item.awaiting = true;
      items.push(item);
      return;
    }
    if (b.type === "subagent") {
      const sub = subs.get(b.subagentId || b.toolUseId || b.id);
      if (sub) {
        placed.add(sub.id);
        items.push({ key: b.id, kind: "block", block: b, sub });
        return;
      }
    }
    items.push({ key: b.id, kind: "block", block: b });
  });
  flushNotices(Number.MAX_SAFE_INTEGER);
  for (const s of subagents) if (!placed.has(s.id)) items.push({ key: `sub-${s.id}`, kind: "subagent", sub: s });
  return items;
}

export function ItemView({ item }: { item: Item }): ReactNode {
  switch (item.kind) {
    case "block":
      return <BlockView block={item.block} sub={item.sub} />;
    case "tool":
      return <ToolUseView block={item.block} result={item.result} sub={item.sub} awaiting={item.awaiting} />;
    case "notice":
      return <NoticeView notice={item.notice} />;
    case "subagent":
      return (
        <div className="block">
          <SubagentThread sub={item.sub} />
        </div>
      );
  }
}

export function fmtMs(ms: number): string {
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
}

/** Plain text of a tool output (no escape sequences), e.g. for copying. */
export { stripAnsi };
