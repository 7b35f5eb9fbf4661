// A small, safe Markdown renderer for assistant text. It builds React
// elements only (never HTML strings), so nothing in the model's output can
// inject markup or script. Supports: ATX headings, paragraphs, fenced code
// (syntax-highlighted, with a copy button), block quotes, ordered and
// unordered lists, horizontal rules, GitHub tables (with alignment), inline
// code, bold, italic, strikethrough, and links whose scheme is http, https
// or mailto.
import { Fragment, memo, useState, type ReactNode } from "react";
import { highlight, useHighlighter } from "./lib/highlight";

type BlockNode =
  | { kind: "heading"; level: number; text: string }
  | { kind: "para"; text: string }
  | { kind: "code"; lang: string; text: string }
  | { kind: "quote"; children: BlockNode[] }
  | { kind: "list"; ordered: boolean; start: number; items: BlockNode[][] }
  | { kind: "table"; align: Align[]; head: string[]; rows: string[][] }
  | { kind: "hr" };

type Align = "left" | "center" | "right" | undefined;

const TABLE_SEP = /^ {0,3}\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

/** The cells of a table row ("| a | b |" or "a | b"); escaped pipes stay. */
export function tableCells(line: string): string[] {
  let l = line.trim();
  if (l.startsWith("|")) l = l.slice(1);
  if (l.endsWith("|") && !l.endsWith("\\|")) l = l.slice(0, -1);
  const cells: string[] = [];
  let cur = "";
  let code = false;
  for (let i = 0; i < l.length; i++) {
    const ch = l[i]!;
    if (ch === "\\" && l[i + 1] === "|") {
      cur += "|";
      i++;
      continue;
    }
    if (ch === "`") code = !code;
    if (ch === "|" && !code) {
      cells.push(cur.trim());
      cur = "";
      continue;
    }
    cur += ch;
  }
  cells.push(cur.trim());
  return cells;
}

function isTableStart(lines: string[], i: number): boolean {
  const head = lines[i]!;
  const sep = lines[i + 1];
  if (sep === undefined || !head.includes("|") || !TABLE_SEP.test(sep) || !sep.includes("-")) return false;
  return tableCells(head).length === tableCells(sep).length;
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const HR = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const BULLET = /^( {0,3})([-*+])\s+(.*)$/;
const ORDERED = /^( {0,3})(\d{1,9})[.)]\s+(.*)$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;

/** Parses Markdown into block nodes. Exported for tests. */
export function parseBlocks(src: string, depth = 0): BlockNode[] {
  const lines = src.replace(/\r\n?/g, "\n").split("\n");
  const out: BlockNode[] = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i]!;
    if (line.trim() === "") {
      i++;
      continue;
    }
    const fence = FENCE.exec(line);
    if (fence) {
      const marker = fence[1]!;
      const body: string[] = [];
      i++;
      while (i < lines.length && !lines[i]!.trimStart().startsWith(marker)) body.push(lines[i++]!);
      i++; // closing fence (or end of text while streaming)
      out.push({ kind: "code", lang: fence[2] ?? "", text: body.join("\n") });
      continue;
    }
    if (isTableStart(lines, i)) {
      const head = tableCells(line);
      const align: Align[] = tableCells(lines[i + 1]!).map((c) =>
        c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : c.startsWith(":") ? "left" : undefined,
      );
      i += 2;
      const rows: string[][] = [];
      while (i < lines.length && lines[i]!.trim() !== "" && lines[i]!.includes("|")) {
        const cells = tableCells(lines[i++]!);
        rows.push(head.map((_, j) => cells[j] ?? ""));
      }
      out.push({ kind: "table", align, head, rows });
      continue;
    }
    const h = HEADING.exec(line);
    if (h) {
      out.push({ kind: "heading", level: h[1]!.length, text: h[2]! });
      i++;
      continue;
    }
    if (HR.test(line)) {
      out.push({ kind: "hr" });
      i++;
      continue;
    }
    if (QUOTE.test(line) && depth < 8) {
      const body: string[] = [];
      while (i < lines.length && QUOTE.test(lines[i]!)) body.push(QUOTE.exec(lines[i++]!)![1]!);
      out.push({ kind: "quote", children: parseBlocks(body.join("\n"), depth + 1) });
      continue;
    }
    const b = BULLET.exec(line) ?? ORDERED.exec(line);
    if (b && depth < 8) {
      const ordered = !BULLET.test(line);
      const re = ordered ? ORDERED : BULLET;
      const items: string[][] = [];
      const start = ordered ? Number(b[2]) : 1;
      while (i < lines.length) {
        const l = lines[i]!;
        const m = re.exec(l);
        if (m) {
          items.push([m[3]!]);
          i++;
          continue;
        }
        if (l.trim() === "") {
          // A blank line ends the list unless the next line continues it.
          const next = lines[i + 1];
          if (next !== undefined && (re.test(next) || /^\s{2,}\S/.test(next))) {
            i++;
            continue;
          }
          break;
        }
        if (/^\s{2,}\S/.test(l) || !(FENCE.test(l) || HEADING.test(l) || QUOTE.test(l) || HR.test(l) || BULLET.test(l) || ORDERED.test(l))) {
          items[items.length - 1]!.push(l.replace(/^\s{2,4}/, ""));
          i++;
          continue;
        }
        break;
      }
      out.push({ kind: "list", ordered, start, items: items.map((it) => parseBlocks(it.join("\n"), depth + 1)) });
      continue;
    }
    const para: string[] = [];
    while (i < lines.length) {
      const l = lines[i]!;
      if (l.trim() === "") break;
      // The first line always belongs to the paragraph (it matched nothing
      // above, or nesting is too deep), so the loop always makes progress.
      if (para.length > 0 && (FENCE.test(l) || HEADING.test(l) || HR.test(l) || QUOTE.test(l) || BULLET.test(l) || ORDERED.test(l) || isTableStart(lines, i))) break;
      para.push(l);
      i++;
    }
    out.push({ kind: "para", text: para.join("\n") });
  }
  return out;
}

/** Only these link targets become links; anything else renders as text. */
export function safeHref(href: string): string | null {
  const h = href.trim();
  if (/^(https?:|mailto:)/i.test(h)) return h;
  return null;
}

const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([\s\S]+?)\*\*|__([\s\S]+?)__|\*([^\s*][\s\S]*?)\*|_([^\s_][\s\S]*?)_(?![A-Za-z0-9])|~~([\s\S]+?)~~|\[([^\]]+)\]\(([^)\s]+)(?:\s+"[^"]*")?\)|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/;

/** Renders inline Markdown as React nodes. Exported for tests. */
export function renderInline(text: string, depth = 0): ReactNode[] {
  const out: ReactNode[] = [];
  let rest = text;
  let key = 0;
  while (rest.length > 0) {
    const m = depth < 6 ? INLINE.exec(rest) : null;
    if (!m) {
      pushText(out, rest, key++);
      break;
    }
    if (m.index > 0) pushText(out, rest.slice(0, m.index), key++);
    const k = key++;
    if (m[1] !== undefined) out.push(<code key={k}>{m[2]!.replace(/^ (.*) $/, "$1")}</code>);
    else if (m[3] !== undefined || m[4] !== undefined) out.push(<strong key={k}>{renderInline(m[3] ?? m[4]!, depth + 1)}</strong>);
    else if (m[5] !== undefined || m[6] !== undefined) out.push(<em key={k}>{renderInline(m[5] ?? m[6]!, depth + 1)}</em>);
    else if (m[7] !== undefined) out.push(<del key={k}>{renderInline(m[7], depth + 1)}</del>);
    else if (m[8] !== undefined) {
      const href = safeHref(m[9]!);
      out.push(
        href ? (
          <a key={k} href={href} target="_blank" rel="noopener noreferrer nofollow">
            {renderInline(m[8], depth + 1)}
          </a>
        ) : (
          <Fragment key={k}>{m[0]}</Fragment>
        ),
      );
    } else if (m[10] !== undefined) {
      out.push(
        <a key={k} href={m[10]} target="_blank" rel="noopener noreferrer nofollow">
          {m[10]}
        </a>,
      );
    }
    rest = rest.slice(m.index + m[0].length);
  }
  return out;
}

function pushText(out: ReactNode[], s: string, key: number): void {
  // Hard line breaks: keep the model's newlines inside a paragraph.
  const parts = s.split("\n");
  parts.forEach((p, i) => {
    if (i > 0) out.push(<br key={`${key}-br${i}`} />);
    if (p) out.push(<Fragment key={`${key}-${i}`}>{p}</Fragment>);
  });
}

function renderBlocks(nodes: BlockNode[]): ReactNode[] {
  return nodes.map((n, i) => {
    switch (n.kind) {
      case "heading": {
        const H = `h${Math.min(6, n.level + 2)}` as "h3";
        return <H key={i}>{renderInline(n.text)}</H>;
      }
      case "para":
        return <p key={i}>{renderInline(n.text)}</p>;
      case "code":
        return <CodeBlock key={i} lang={n.lang} text={n.text} />;
      case "table":
        return (
          <div key={i} className="md-table-wrap" tabIndex={0} role="region" aria-label="Table">
            <table className="md-table">
              <thead>
                <tr>
                  {n.head.map((c, j) => (
                    <th key={j} style={n.align[j] ? { textAlign: n.align[j] } : undefined}>
                      {renderInline(c)}
                    </th>
                  ))}
                </tr>
              </thead>
              <tbody>
                {n.rows.map((r, k) => (
                  <tr key={k}>
                    {r.map((c, j) => (
                      <td key={j} style={n.align[j] ? { textAlign: n.align[j] } : undefined}>
                        {renderInline(c)}
                      </td>
                    ))}
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        );
      case "quote":
        return <blockquote key={i}>{renderBlocks(n.children)}</blockquote>;
      case "list": {
        const items = n.items.map((it, j) => <li key={j}>{renderListItem(it)}</li>);
        return n.ordered ? (
          <ol key={i} start={n.start}>
            {items}
          </ol>
        ) : (
          <ul key={i}>{items}</ul>
        );
      }
      case "hr":
        return <hr key={i} />;
    }
  });
}

// A list item that is one paragraph renders without a <p> (tight list).
function renderListItem(nodes: BlockNode[]): ReactNode {
  if (nodes.length === 1 && nodes[0]!.kind === "para") return renderInline(nodes[0]!.text);
  return renderBlocks(nodes);
}

/** Copies text to the clipboard (with a fallback where the Clipboard API is missing). */
export async function copyText(text: string): Promise<void> {
  if (navigator.clipboard?.writeText) {
    try {
      await navigator.clipboard.writeText(text);
      return;
    } catch {
      // not allowed here: fall back
    }
  }
  const ta = document.createElement("textarea");
  ta.value = text;
  ta.setAttribute("readonly", "");
  ta.style.position = "fixed";
  ta.style.opacity = "0";
  document.body.appendChild(ta);
  ta.select();
  document.execCommand("copy");
  ta.remove();
}

export function CopyButton({ text, label = "Copy" }: { text: string; label?: string }) {
  const [done, setDone] = useState(false);
  return (
    // The label is drawn by CSS (::before), so it never joins the text of
    // the message or code it sits beside (selection, innerText).
    <button
      type="button"
      className="copy-btn"
      data-testid="copy-button"
      data-copied={done || undefined}
      aria-label={done ? "Copied" : label}
      title={label}
      onClick={() => {
        void copyText(text).then(() => {
          setDone(true);
          setTimeout(() => setDone(false), 1500);
        });
      }}
    />
  );
}

function CodeBlock({ lang, text }: { lang: string; text: string }) {
  const hl = useHighlighter();
  const coloured = highlight(hl, text, lang);
  return (
    <div className="md-code-wrap">
      <div className="md-code-bar">
        <span className="muted small">{lang || "text"}</span>
        <CopyButton text={text} label="Copy code" />
      </div>
      <pre className="md-code hljs" data-lang={lang || undefined}>
        <code>{coloured ?? text}</code>
      </pre>
    </div>
  );
}

export const Markdown = memo(function Markdown({ text }: { text: string }) {
  return <div className="md">{renderBlocks(parseBlocks(text))}</div>;
});
