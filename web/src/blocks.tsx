// Views of conversation blocks. Each view is memoized on the block object:
// the reducer replaces a block only when it changes, so a delta re-renders
// exactly one block, once per animation frame.
import { memo, useLayoutEffect, useMemo, useRef, useState, type ReactNode } from "react";
import type { AnyBlock, Json, Notice, Subagent } from "@agentd/client";
import { diffLines, editsOf, type FileEdit } from "./diff";
import { Markdown } from "./markdown";
import { stats } from "./app-context";

const SHELL_TOOLS = new Set(["bash", "shell", "exec", "exec_command", "run_shell_command", "command", "local_shell"]);
const OUTPUT_CAP = 256 * 1024; // characters of tool output shown before "show all"

function countRender(id: string): void {
  stats.blockRenders.set(id, (stats.blockRenders.get(id) ?? 0) + 1);
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

// A finished chunk never changes, so while output streams only the last
// chunk's text node is replaced: layout work per frame stays small however
// long the output grows.
const Chunk = memo(function Chunk({ text }: { text: string }) {
  return <span>{text}</span>;
});

export function TerminalOutput({ text, isError, testId }: { text: string; isError?: boolean | undefined; testId?: string }) {
  const [all, setAll] = useState(false);
  const pre = useRef<HTMLPreElement>(null);
  const pinned = useRef(true);
  const cut = !all && text.length > OUTPUT_CAP;
  // Cut at a line start so chunk boundaries stay stable as more text arrives.
  const shown = cut ? text.slice(text.indexOf("\n", text.length - OUTPUT_CAP) + 1) : text;
  const chunks = useMemo(() => chunkLines(shown), [shown]);
  // Like a terminal: keep showing the newest output unless the reader scrolled up.
  useLayoutEffect(() => {
    const el = pre.current;
    if (el && pinned.current) el.scrollTop = el.scrollHeight;
  }, [text]);
  return (
    <div className="term-wrap">
      {cut && (
        <button type="button" className="linkish" onClick={() => setAll(true)}>
          Show all output ({Math.round(text.length / 1024)} KB; the last {OUTPUT_CAP / 1024} KB are shown)
        </button>
      )}
      <pre
        ref={pre}
        className={`terminal${isError ? " is-error" : ""}${text ? "" : " empty"}`}
        data-testid={testId}
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

function DiffView({ edit }: { edit: FileEdit }) {
  const lines = diffLines(edit.oldText, edit.newText);
  return (
    <div className="diff" data-testid="diff">
      {edit.path && <div className="diff-path">{edit.path}</div>}
      <pre>
        {lines.map((l, i) => (
          <div key={i} className={l.op === "+" ? "add" : l.op === "-" ? "del" : "ctx"}>
            <span className="gutter" aria-hidden="true">
              {l.op}
            </span>
            {l.text || " "}
          </div>
        ))}
      </pre>
    </div>
  );
}

function JsonView({ value }: { value: Json | undefined }) {
  if (value === undefined) return null;
  return <pre className="json">{JSON.stringify(value, null, 2)}</pre>;
}

interface ToolProps {
  block: AnyBlock;
  result: AnyBlock | undefined;
  sub: Subagent | undefined;
  awaiting?: boolean | undefined;
}

const ToolUseView = memo(function ToolUseView({ block, result, sub, awaiting }: ToolProps) {
  countRender(block.id);
  const cmd = commandOf(block);
  const edits = cmd === null ? editsOf(block.input) : null;
  // A tool_use block is "complete" once its input is; the call itself is
  // done only when its result is there.
  const status = result ? (result.isError ? "error" : result.status ?? "complete") : block.status === "error" ? "error" : "pending";
  const title = block.displayName || block.toolName || "tool";
  return (
    <div className={`block tool${result?.isError ? " is-error" : ""}`} data-testid="block-tool_use" data-block-id={block.id} data-tool={block.toolName}>
      <div className="tool-head">
        <StatusDot status={status} />
        <span className="tool-name">{title}</span>
        {block.description && <span className="muted"> — {block.description}</span>}
        {result?.durationMs ? <span className="muted small"> {fmtMs(result.durationMs)}</span> : null}
        {awaiting && !result ? (
          <span className="awaiting small" data-testid="awaiting-permission">
            awaiting permission
          </span>
        ) : null}
      </div>
      {cmd !== null ? (
        <div className="shell">
          <pre className="terminal cmd">
            <span className="prompt" aria-hidden="true">
              ${" "}
            </span>
            {cmd}
          </pre>
          {result && <TerminalOutput text={result.output ?? ""} isError={result.isError} testId="tool-output" />}
        </div>
      ) : edits ? (
        <>
          {edits.map((e, i) => (
            <DiffView key={i} edit={e} />
          ))}
          {result && (result.isError || (result.output ?? "").length > 0) && (
            <details className="tool-result">
              <summary>Result</summary>
              <TerminalOutput text={result.output ?? ""} isError={result.isError} testId="tool-output" />
            </details>
          )}
        </>
      ) : (
        <>
          <details className="tool-input">
            <summary>Input</summary>
            <JsonView value={block.input} />
          </details>
          {result && <TerminalOutput text={result.output ?? ""} isError={result.isError} testId="tool-output" />}
        </>
      )}
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
          <div className="bubble">{block.content}</div>
        </div>
      );
    case "assistant_text":
      return (
        <div className="block assistant" {...common}>
          <Markdown text={block.content ?? ""} />
        </div>
      );
    case "thinking":
      return (
        <details className="block thinking" {...common}>
          <summary>{block.status === "pending" ? "Thinking…" : "Thought"}{block.summary ? `: ${block.summary}` : ""}</summary>
          <div className="thinking-body">{block.content}</div>
        </details>
      );
    case "tool_result":
      return (
        <div className="block tool" {...common}>
          <TerminalOutput text={block.output ?? ""} isError={block.isError} testId="tool-output" />
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
          <strong>Error{block.code ? ` (${block.code})` : ""}:</strong> {block.message}
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

export const NoticeView = memo(function NoticeView({ notice }: { notice: Notice }) {
  const title = notice.kind === "turn_failed" ? "Turn failed" : notice.kind === "turn_interrupted" ? "Turn interrupted" : "Error";
  return (
    <div className={`block notice notice-${notice.kind}`} role="alert" data-testid={`notice-${notice.kind}`}>
      <strong>{title}</strong>
      {notice.message && notice.kind !== "turn_interrupted" ? `: ${notice.message}` : ""}
      {notice.code ? <span className="muted small"> ({notice.code})</span> : null}
    </div>
  );
});

// ---- items: blocks with their results and threads attached ----------------

export type Item =
  | { key: string; kind: "block"; block: AnyBlock; sub?: Subagent }
  | { key: string; kind: "tool"; block: AnyBlock; result: AnyBlock | undefined; sub: Subagent | undefined; awaiting?: boolean }
  | { key: string; kind: "notice"; notice: Notice }
  | { key: string; kind: "subagent"; sub: Subagent };

/**
 * Turns blocks into list items: a tool_result is shown inside its tool_use,
 * a subagent thread inside the tool call or subagent block that spawned it,
 * notices after the block they followed, and threads with no parent block
 * at the end.
 */
export function buildItems(
  blocks: readonly AnyBlock[],
  notices: readonly Notice[],
  subagents: readonly Subagent[],
  awaitingPermission: ReadonlySet<string> = new Set(),
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
