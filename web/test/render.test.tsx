import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import { noticesOf, reduce, stateFromSnapshot, type AnyBlock, type Notice, type Subagent } from "@agentd/client";
import { AppContext } from "../src/app-context";
import { ItemView, buildItems, commandOf } from "../src/blocks";
import { diffLines, editsOf } from "../src/diff";
import { Markdown, parseBlocks, safeHref } from "../src/markdown";
import { buildTree } from "../src/Workspace";

const md = (s: string) => renderToStaticMarkup(<Markdown text={s} />);

describe("markdown", () => {
  it("renders the common constructs", () => {
    const html = md("# Title\n\nSome **bold**, *it*, `code` and [a link](https://x.test/a).\n\n- one\n- two\n\n1. first\n2. second\n\n```go\nfmt.Println(1)\n```\n\n> quoted");
    expect(html).toContain("<h3>Title</h3>");
    expect(html).toContain("<strong>bold</strong>");
    expect(html).toContain("<em>it</em>");
    expect(html).toContain("<code>code</code>");
    expect(html).toContain('<a href="https://x.test/a" target="_blank" rel="noopener noreferrer nofollow">a link</a>');
    expect(html).toContain("<ul><li>one</li><li>two</li></ul>");
    expect(html).toContain('<ol start="1"><li>first</li><li>second</li></ol>');
    expect(html).toContain('<pre class="md-code hljs" data-lang="go"><code>fmt.Println(1)</code></pre>');
    expect(html).toContain('aria-label="Copy code"');
    expect(html).toContain("<blockquote><p>quoted</p></blockquote>");
  });

  it("never injects raw HTML or script URLs", () => {
    const html = md('<img src=x onerror=alert(1)> <script>alert(1)</script> [x](javascript:alert(1)) [y](data:text/html,hi)');
    expect(html).not.toContain("<img");
    expect(html).not.toContain("<script");
    expect(html).not.toContain('href="javascript');
    expect(html).not.toContain('href="data');
    expect(html).toContain("&lt;script&gt;");
    expect(safeHref(" JavaScript:alert(1)")).toBeNull();
  });

  it("renders an unterminated code fence while it streams", () => {
    expect(parseBlocks("```\npartial")).toEqual([{ kind: "code", lang: "", text: "partial" }]);
  });

  it("survives pathological input", () => {
    const deep = ">".repeat(500) + " x\n" + "*".repeat(10_000) + "\n" + "- ".repeat(2000);
    expect(() => md(deep)).not.toThrow();
  });
});

describe("diff", () => {
  it("diffs lines with context", () => {
    expect(diffLines("a\nb\nc", "a\nB\nc")).toEqual([
      { op: " ", text: "a" },
      { op: "-", text: "b" },
      { op: "+", text: "B" },
      { op: " ", text: "c" },
    ]);
    expect(diffLines("", "x\ny").map((l) => l.op)).toEqual(["+", "+"]);
    // A file's final newline is no extra empty line.
    expect(diffLines("", "x\ny\n")).toEqual([{ op: "+", text: "x" }, { op: "+", text: "y" }]);
    expect(diffLines("a\n\n", "a\n")).toEqual([{ op: " ", text: "a" }, { op: "-", text: "" }]);
  });

  it("recognises Edit, MultiEdit and Write inputs", () => {
    expect(editsOf({ file_path: "a.go", old_string: "x", new_string: "y" })).toEqual([{ path: "a.go", oldText: "x", newText: "y" }]);
    expect(editsOf({ file_path: "a.go", edits: [{ old_string: "1", new_string: "2" }] })).toHaveLength(1);
    expect(editsOf({ file_path: "n.txt", content: "hi" })).toEqual([{ path: "n.txt", oldText: "", newText: "hi" }]);
    expect(editsOf({ command: "ls" })).toBeNull();
    expect(editsOf(null)).toBeNull();
  });
});

describe("items", () => {
  const blocks: AnyBlock[] = [
    { id: "u", type: "user_message", content: "go" },
    { id: "t1", type: "tool_use", toolUseId: "t1", toolName: "Bash", input: { command: "ls" } },
    { id: "t1-result", type: "tool_result", toolUseId: "t1", output: "a\n" },
    { id: "t2", type: "tool_use", toolUseId: "t2", toolName: "Task" },
    { id: "r-orphan", type: "tool_result", toolUseId: "zz", output: "?" },
  ];
  const sub: Subagent = { id: "t2", toolUseId: "t2", status: "pending", blocks: [] };
  const lone: Subagent = { id: "t9", toolUseId: "t9", status: "complete", blocks: [] };
  const notice: Notice = { key: "turn-0", kind: "turn_failed", message: "x", afterBlock: 3 };

  it("nests results and threads in their tool call and places notices after their block", () => {
    const items = buildItems(blocks, [notice], [sub, lone]);
    expect(items.map((i) => i.key)).toEqual(["u", "t1", "notice-turn-0", "t2", "r-orphan", "sub-t9"]);
    const t1 = items[1]!;
    expect(t1.kind === "tool" && t1.result?.output).toBe("a\n");
    const t2 = items[3]!;
    expect(t2.kind === "tool" && t2.sub?.id).toBe("t2");
  });

  it("shows a failed turn of a snapshot after its blocks, once, and an interrupted one without its message", () => {
    // What GET /api/sessions/{id} sends after a reload: no events, only turns.
    const snap = stateFromSnapshot({
      lastSeq: 9,
      blocks: [blocks[0]!, { id: "e", type: "error", message: "API Error: 400" }, { id: "u2", type: "user_message", content: "again" }],
      turns: [
        { queryId: "q1", status: "failed", error: "API Error: 400", code: "MODEL_ERROR", afterBlock: 2 },
        { queryId: "q2", status: "completed", interrupted: true, afterBlock: 3 },
        { queryId: "q3", status: "completed", afterBlock: 3 },
      ],
    });
    const items = buildItems(snap.blocks, noticesOf(snap), []);
    expect(items.map((i) => i.key)).toEqual(["u", "e", "notice-turn-0", "u2", "notice-turn-1"]);
    const failed = renderToStaticMarkup(<ItemView item={items[2]!} />);
    expect(failed).toContain('data-testid="notice-turn_failed"');
    expect(failed).toContain("Model error</strong>: API Error: 400");
    expect(failed).toContain("(MODEL_ERROR)");
    const interrupted = renderToStaticMarkup(<ItemView item={items[4]!} />);
    expect(interrupted).toContain('data-testid="notice-turn_interrupted"');
    expect(interrupted).not.toContain("turn interrupted");
    // A live event after the snapshot for a new turn adds nothing until it ends.
    const live = reduce(snap, { seq: 10, type: "query:started", payload: { queryId: "q4" }, context: { sessionId: "s", conversationId: "main", source: "client", timestamp: "2026-11-21T23:47:49Z", actor: null } });
    expect(noticesOf(live).map((n) => n.key)).toEqual(["turn-0", "turn-1"]);
  });

  it("nests a thread in the subagent block that spawned it", () => {
    const sb: AnyBlock = { id: "t3", type: "subagent", subagentId: "t3", toolUseId: "t3", input: "do it", status: "complete" };
    const thread: Subagent = {
      id: "t3", toolUseId: "t3", status: "complete", prompt: "do it", output: "did it",
      blocks: [
        { id: "s-u", type: "user_message", content: "do it" },
        { id: "s-t", type: "assistant_text", content: "did it" },
      ],
    };
    const items = buildItems([blocks[0]!, sb], [], [thread, lone]);
    expect(items.map((i) => i.key)).toEqual(["u", "t3", "sub-t9"]);
    const it3 = items[1]!;
    expect(it3.kind === "block" && it3.sub?.id).toBe("t3");
    // The prompt and the output each show once: as the thread's first and last blocks.
    const html = renderToStaticMarkup(<ItemView item={it3} />);
    expect(html).toContain('data-testid="subagent-thread"');
    expect(html.split("do it").length - 1).toBe(1);
    expect(html.split("did it").length - 1).toBe(1);
    expect(html).not.toContain("subagent-output");
    // Without a matching thread, the block stands alone.
    expect(buildItems([sb], [], []).map((i) => i.kind === "block" && !i.sub)).toEqual([true]);
  });

  it("finds shell commands", () => {
    expect(commandOf(blocks[1]!)).toBe("ls");
    expect(commandOf({ id: "x", type: "tool_use", toolName: "shell", input: { command: ["bash", "-lc", "ls"] } })).toBe("bash -lc ls");
    expect(commandOf({ id: "x", type: "tool_use", toolName: "Read", input: { file_path: "a" } })).toBeNull();
  });
});

describe("file tree", () => {
  it("nests paths, folders first, and dedupes", () => {
    const t = buildTree([{ path: "b.txt" }, { path: "src/x.go", size: 3 }, { path: "src", isDir: true }, { path: "src/x.go" }, { path: "a/b/c.md" }]);
    expect(t.map((n) => n.name)).toEqual(["a", "src", "b.txt"]);
    expect(t[1]!.children.map((n) => n.path)).toEqual(["src/x.go"]);
    expect(t[0]!.children[0]!.children[0]!.path).toBe("a/b/c.md");
  });
});

import { chunkLines } from "../src/blocks";
describe("terminal output chunks", () => {
  it("splits at line boundaries without losing or duplicating text", () => {
    const text = Array.from({ length: 450 }, (_, i) => `line ${i + 1}`).join("\n") + "\npartial";
    const chunks = chunkLines(text);
    expect(chunks.join("")).toBe(text);
    expect(chunks).toHaveLength(3);
    expect(chunks[0]!.split("\n")).toHaveLength(201); // 200 lines + "" after the last newline
    expect(chunkLines("")).toEqual([""]);
    // Appending never changes finished chunks.
    expect(chunkLines(text + " more\nx").slice(0, 2)).toEqual(chunks.slice(0, 2));
  });
});

import type { SessionSummary } from "@agentd/client";
import { mergeList, upsert } from "../src/SessionList";
describe("session list", () => {
  const s = (id: string, createdAt: string, lastActivity = createdAt, status: SessionSummary["status"] = "idle"): SessionSummary => ({
    sessionId: id, type: "shell", agentProfileReference: "default", name: "", status, createdAt, lastActivity, lastSeq: 0,
  });
  it("upserts live frames newest first and drops deleted sessions", () => {
    let l = upsert([], s("a", "2026-01-01T00:00:00Z"));
    l = upsert(l, s("b", "2026-01-02T00:00:00Z"));
    l = upsert(l, { ...s("a", "2026-01-01T00:00:00Z", "2026-01-03T00:00:00Z"), status: "running" });
    expect(l.map((x) => `${x.sessionId}:${x.status}`)).toEqual(["b:idle", "a:running"]);
    expect(upsert(l, { ...s("b", "2026-01-02T00:00:00Z"), deleted: true }).map((x) => x.sessionId)).toEqual(["a"]);
    expect(upsert(l, { ...s("zz", "2026-01-02T00:00:00Z"), deleted: true })).toBe(l);
  });
  it("keeps a live frame newer than a listing that was in flight", () => {
    const live = [{ ...s("a", "2026-01-01T00:00:00Z", "2026-01-05T00:00:00Z"), status: "running" as const }];
    const fetched = [s("a", "2026-01-01T00:00:00Z", "2026-01-04T00:00:00Z"), s("c", "2026-01-03T00:00:00Z")];
    const m = mergeList(fetched, live);
    expect(m.map((x) => `${x.sessionId}:${x.status}`)).toEqual(["c:idle", "a:running"]);
  });
  it("keeps sessions created, and drops those deleted, while a listing was in flight", () => {
    // The listing was taken before "new" was created and "gone" deleted; frames said so meanwhile.
    const fetched = [s("old", "2026-01-01T00:00:00Z"), s("gone", "2026-01-02T00:00:00Z"), s("stale", "2026-01-03T00:00:00Z")];
    let cur = [s("old", "2026-01-01T00:00:00Z"), s("gone", "2026-01-02T00:00:00Z"), s("stale", "2026-01-03T00:00:00Z")];
    cur = upsert(cur, s("new", "2026-01-04T00:00:00Z"));
    cur = upsert(cur, { ...s("gone", "2026-01-02T00:00:00Z"), deleted: true });
    expect(mergeList(fetched, cur, new Set(["new", "gone"])).map((x) => x.sessionId)).toEqual(["new", "stale", "old"]);
    // A session the listing lacks and no frame touched is gone (deleted while disconnected).
    expect(mergeList([s("old", "2026-01-01T00:00:00Z")], cur, new Set()).map((x) => x.sessionId)).toEqual(["old"]);
  });
});

describe("tables", () => {
  it("renders GitHub tables with alignment and inline markup", () => {
    const html = md("| Name | Size | Notes |\n|:-----|-----:|:---:|\n| `a.go` | 12 | **new** |\n| b \\| c | 3 |\n\nafter");
    expect(html).toContain('<table class="md-table">');
    expect(html).toContain('<th style="text-align:left">Name</th><th style="text-align:right">Size</th><th style="text-align:center">Notes</th>');
    expect(html).toContain('<td style="text-align:left"><code>a.go</code></td><td style="text-align:right">12</td><td style="text-align:center"><strong>new</strong></td>');
    expect(html).toContain('<td style="text-align:left">b | c</td><td style="text-align:right">3</td><td style="text-align:center"></td>');
    expect(html).toContain("<p>after</p>");
    // A pipe in a paragraph is not a table.
    expect(md("a | b\nnot a separator")).not.toContain("<table");
  });
});

describe("ANSI", () => {
  it("renders colours as spans and strips them for plain text", async () => {
    const { ansiNodes, stripAnsi } = await import("../src/lib/ansi");
    const html = renderToStaticMarkup(<>{ansiNodes("\x1b[31mred\x1b[0m plain \x1b[1;32mbold\x1b[0m \x1b[38;5;208mx\x1b[0m\x1b[2K")}</>);
    expect(html).toContain('<span class="ansi-red-fg">red</span>');
    expect(html).toContain(" plain ");
    expect(html).toContain('<span class="ansi-green-fg ansi-bold">bold</span>');
    expect(html).toContain('style="color:rgb(255, 135, 0)"');
    expect(html).not.toContain("\x1b");
    expect(stripAnsi("\x1b[31mred\x1b[0m \x1b]0;title\x07ok")).toBe("red ok");
    expect(ansiNodes("no escapes")).toBe("no escapes");
  });
});

describe("sessions", () => {
  it("gives sessions created together unique short ids", async () => {
    const { shortIds } = await import("../src/SessionList");
    const ids = ["01a213f9-8132-7db0-9e2b-22f4ca08a90e", "01a213f9-8132-7db0-9e2b-22f4ca18a90e", "01a213f9-9151-72e0-91f2-964c9ff024a8"];
    const m = shortIds(ids);
    expect(new Set(m.values()).size).toBe(3);
    expect(m.get(ids[2]!)).toBe("9ff024a8".slice(-6));
    for (const id of ids) expect(id.replace(/-/g, "").endsWith(m.get(id)!)).toBe(true);
  });

  it("tells a paused session from one that ended", async () => {
    const { statusLabel } = await import("../src/SessionList");
    expect(statusLabel("terminated", true).label).toBe("paused");
    expect(statusLabel("terminated", false).label).toBe("ended");
    expect(statusLabel("running", true).label).toBe("working");
  });
});

describe("errors of a failed turn", () => {
  it("shows one error per failed turn, with the turn's code and its message to retry", async () => {
    const { mergeTurnErrors } = await import("../src/blocks");
    const blocks: AnyBlock[] = [
      { id: "q1-user", type: "user_message", content: "BREAK-DEMO now" },
      { id: "m-0", type: "error", message: "API Error: 400 refused", code: "unknown" },
    ];
    const turns = [{ queryId: "q1", status: "failed" as const, error: "API Error: 400 refused", code: "MODEL_ERROR", afterBlock: 2 }];
    const notices: Notice[] = [
      { key: "error-0", kind: "error", message: "API Error: 400 refused", code: "MODEL_ERROR", afterBlock: 2 },
      { key: "turn-0", kind: "turn_failed", message: "API Error: 400 refused", code: "MODEL_ERROR", queryId: "q1", afterBlock: 2 },
    ];
    const m = mergeTurnErrors(blocks, notices, turns);
    expect([...m.hidden]).toEqual(["m-0"]);
    expect(m.notices).toHaveLength(1);
    expect(m.notices[0]).toMatchObject({ kind: "turn_failed", code: "MODEL_ERROR", retry: "BREAK-DEMO now" });
    const items = buildItems(blocks, m.notices, [], new Set(), m.hidden);
    expect(items.map((i) => i.kind)).toEqual(["block", "notice"]);
    // An error the failure does not repeat stays.
    const other = mergeTurnErrors([...blocks, { id: "x", type: "error", message: "disk full" }], notices, [{ ...turns[0]!, afterBlock: 3 }]);
    expect(other.hidden.has("x")).toBe(false);
  });

  it("paths relative to the workspace, and the running tool", async () => {
    const { relPath } = await import("../src/blocks");
    const { runningTool } = await import("../src/SessionView");
    expect(relPath("/data/workspaces/s1/src/a.go", { sessionId: "s1" })).toBe("src/a.go");
    expect(relPath("/w/x.txt", { sessionId: "s1", workDir: "/w" })).toBe("x.txt");
    expect(relPath("/etc/passwd", { sessionId: "s1", workDir: "/w" })).toBe("/etc/passwd");
    const bl: AnyBlock[] = [
      { id: "u", type: "user_message", content: "go" },
      { id: "t1", type: "tool_use", toolUseId: "t1", toolName: "Bash" },
      { id: "t1-result", type: "tool_result", toolUseId: "t1" },
      { id: "t2", type: "tool_use", toolUseId: "t2", toolName: "Edit" },
    ];
    expect(runningTool(bl)?.id).toBe("t2");
    expect(runningTool(bl.slice(0, 3))).toBeUndefined();
    // A command whose output still streams is running.
    expect(runningTool([...bl.slice(0, 2), { id: "t1-result", type: "tool_result", toolUseId: "t1", status: "pending" }])?.id).toBe("t1");
  });
});

describe("turn progress", () => {
  it("shows the running tool, the elapsed time and the turn's tokens", async () => {
    const { TurnProgress } = await import("../src/SessionView");
    const st = stateFromSnapshot({
      status: "running",
      activeQueryId: "q1",
      blocks: [
        { id: "q1-user", type: "user_message", content: "go" },
        { id: "t1", type: "tool_use", toolUseId: "t1", toolName: "Bash", input: { command: "npm test\nmore" } },
      ],
      turns: [{ queryId: "q1", status: "running", startedAt: new Date(Date.now() - 83_000).toISOString(), usage: { inputTokens: 12_345, outputTokens: 67 } }],
      costUSD: 0.0123,
    });
    const html = renderToStaticMarkup(<TurnProgress state={st} />);
    expect(html).toContain('data-testid="turn-activity">Bash: npm test…');
    expect(html).toMatch(/data-testid="turn-elapsed">1m 2[2-4]s/);
    expect(html).toContain("↑12.3k ↓67");
    expect(html).toContain("$0.0123");
  });
});

describe("attachments and truncated outputs", () => {
  // The views that fetch artifacts need the app's client; static rendering
  // runs no effect, so it is never called.
  const app = { client: {} as never, socket: {} as never, unauthorized: () => {} };
  const render = (node: React.ReactNode) => renderToStaticMarkup(<AppContext.Provider value={app}>{node}</AppContext.Provider>);
  const sha = "ab".repeat(32);

  it("shows a truncated output as head, bytes omitted, tail and Show all", () => {
    const head = "line 1\nline 2\n";
    const tail = "line 99\nline 100\n";
    const blocks = [
      { id: "t1", type: "tool_use", toolName: "Bash", toolUseId: "t1", input: { command: "seq 100" }, status: "complete" },
      {
        id: "t1-result", type: "tool_result", toolUseId: "t1", output: head, isError: false,
        truncated: { field: "output", totalBytes: 292, tail, artifact: { sha256: sha, size: 292, contentType: "text/plain; charset=utf-8" } },
      },
    ] as AnyBlock[];
    const html = render(<ItemView item={buildItems(blocks, [], [])[0]!} />);
    expect(html).toContain('data-testid="truncated"');
    expect(html).toContain(`… ${(292 - head.length - tail.length).toLocaleString()} bytes omitted …`);
    expect(html).toContain('data-testid="show-all"');
    expect(html.indexOf("line 2")).toBeLessThan(html.indexOf("bytes omitted"));
    expect(html.indexOf("bytes omitted")).toBeLessThan(html.indexOf("line 99"));
    // Still streaming: no artifact yet, no button.
    const streaming = { ...blocks[1]!, truncated: { field: "output", totalBytes: 292, tail } } as AnyBlock;
    const html2 = render(<ItemView item={buildItems([blocks[0]!, streaming], [], [])[0]!} />);
    expect(html2).not.toContain('data-testid="show-all"');
    expect(html2).toContain("bytes omitted");
  });

  it("shows a tool input the server bounded with a note loading the whole one", () => {
    const content = "line 1\n… [5242880 bytes omitted] …\nline 99999\n";
    const truncated = { field: "input", totalBytes: 5_347_737, tail: "", artifact: { sha256: sha, size: 5_347_737, contentType: "application/json" } };
    const use = { id: "w1", type: "tool_use", toolName: "Write", toolUseId: "w1", input: { file_path: "/w/big.txt", content }, status: "complete", truncated } as AnyBlock;
    const html = render(<ItemView item={buildItems([use], [], [])[0]!} />);
    expect(html).toContain('data-testid="input-truncated"');
    expect(html).toContain("input truncated: 5.1 MB");
    expect(html).toContain('data-testid="show-all-input"');
    expect(html).toContain("5242880 bytes omitted");
    expect(html).toContain("big.txt");
    // A shell command's input too; the note comes after the command.
    const bash = { id: "b1", type: "tool_use", toolName: "Bash", toolUseId: "b1", input: { command: "echo " + content }, status: "complete", truncated } as AnyBlock;
    const html2 = render(<ItemView item={buildItems([bash], [], [])[0]!} />);
    expect(html2.indexOf('data-testid="tool-command"')).toBeLessThan(html2.indexOf('data-testid="input-truncated"'));
    // Not kept: the note says why, without a button.
    const lost = { ...use, truncated: { field: "input", totalBytes: 5_347_737, tail: "", artifactError: "quota exceeded" } } as AnyBlock;
    const html3 = render(<ItemView item={buildItems([lost], [], [])[0]!} />);
    expect(html3).toContain("the whole input was not kept: quota exceeded");
    expect(html3).not.toContain('data-testid="show-all-input"');
    // A short input replaced the bounded one (no artifact, no error): no note;
    // nor for an output's truncation.
    for (const t of [{ field: "input", totalBytes: 20, tail: "" }, { ...truncated, field: "output" }]) {
      const whole = { ...use, input: { file_path: "/w/a", content: "x" }, truncated: t } as AnyBlock;
      expect(render(<ItemView item={buildItems([whole], [], [])[0]!} />)).not.toContain("input-truncated");
    }
  });

  it("shows a user's images and files and opens a quiet tool whose result has images", () => {
    const user = { id: "q1-user", type: "user_message", content: "look", attachments: [{ sha256: sha, size: 10, contentType: "image/png" }, { sha256: sha, size: 3, name: "a.txt" }] } as AnyBlock;
    const html = render(<ItemView item={buildItems([user], [], [])[0]!} />);
    expect(html).toContain('data-testid="attachments"');
    expect(html).toContain('data-testid="attachment-loading"');
    expect(html).toContain('data-testid="attachment-file"');
    expect(html).toContain("a.txt");
    const read = [
      { id: "r1", type: "tool_use", toolName: "Read", toolUseId: "r1", input: { file_path: "/w/p.png" }, status: "complete" },
      { id: "r1-result", type: "tool_result", toolUseId: "r1", output: "[image: image/png]", isError: false, attachments: [{ sha256: sha, size: 10, contentType: "image/png" }] },
    ] as AnyBlock[];
    const tool = render(<ItemView item={buildItems(read, [], [])[0]!} />);
    expect(tool).toContain('aria-expanded="true"');
    expect(tool).toContain('data-testid="attachment-loading"');
  });
});
