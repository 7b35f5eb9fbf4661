// Syntax highlighting as React elements (never HTML strings): the
// highlighter chunk loads on first use; until then, and for languages it
// does not know, code renders as plain text.
import { useEffect, useState, type ReactNode } from "react";
import type { Root, RootContent } from "hast";

type Lowlight = typeof import("./highlighter").lowlight;

let loaded: Lowlight | null = null;
let loading: Promise<Lowlight> | null = null;
const waiters = new Set<() => void>();

function load(): Promise<Lowlight> {
  if (!loading) {
    loading = import("./highlighter").then((m) => {
      loaded = m.lowlight;
      for (const w of waiters) w();
      waiters.clear();
      return m.lowlight;
    });
    loading.catch(() => {
      loading = null; // try again next time
    });
  }
  return loading;
}

/** The highlighter once loaded (re-renders the caller when it arrives). */
export function useHighlighter(): Lowlight | null {
  const [hl, setHl] = useState<Lowlight | null>(loaded);
  useEffect(() => {
    if (hl) return;
    const done = () => setHl(loaded);
    waiters.add(done);
    void load().catch(() => {});
    return () => {
      waiters.delete(done);
    };
  }, [hl]);
  return hl;
}

/** The language of a file path, by extension or name; "" when unknown. */
export function languageOf(path: string | undefined): string {
  if (!path) return "";
  const base = path.slice(path.lastIndexOf("/") + 1).toLowerCase();
  if (base === "dockerfile") return "dockerfile";
  if (base === "makefile" || base === "gnumakefile") return "makefile";
  const dot = base.lastIndexOf(".");
  return dot > 0 ? base.slice(dot + 1) : "";
}

/** Highlighting is skipped for text larger than this (it would stall a frame). */
export const MAX_HIGHLIGHT = 200_000;

/** code as highlighted React nodes, or null when lang is unknown or the highlighter is not there yet. */
export function highlight(hl: Lowlight | null, code: string, lang: string): ReactNode[] | null {
  if (!hl || !lang || code.length > MAX_HIGHLIGHT) return null;
  const l = lang.toLowerCase();
  if (!hl.registered(l)) return null;
  try {
    return toReact(hl.highlight(l, code));
  } catch {
    return null;
  }
}

function toReact(root: Root): ReactNode[] {
  return root.children.map((c, i) => node(c, i));
}

function node(n: RootContent, key: number): ReactNode {
  if (n.type === "text") return n.value;
  if (n.type !== "element") return null;
  const cls = n.properties?.className;
  const className = Array.isArray(cls) ? cls.join(" ") : typeof cls === "string" ? cls : undefined;
  return (
    <span key={key} className={className}>
      {n.children.map((c, i) => node(c as RootContent, i))}
    </span>
  );
}

/** Splits highlighted nodes into lines, so a code view can number them. */
export function highlightLines(hl: Lowlight | null, code: string, lang: string): ReactNode[][] | null {
  if (!hl || !lang || code.length > MAX_HIGHLIGHT) return null;
  const l = lang.toLowerCase();
  if (!hl.registered(l)) return null;
  let tree: Root;
  try {
    tree = hl.highlight(l, code);
  } catch {
    return null;
  }
  const lines: ReactNode[][] = [[]];
  let k = 0;
  // Walk the tree; a text with newlines ends lines, re-opening the spans it was in.
  const walk = (n: RootContent, classes: string[]) => {
    if (n.type === "text") {
      const parts = n.value.split("\n");
      parts.forEach((p, i) => {
        if (i > 0) lines.push([]);
        if (p) lines[lines.length - 1]!.push(wrap(p, classes, k++));
      });
      return;
    }
    if (n.type !== "element") return;
    const cls = n.properties?.className;
    const c = Array.isArray(cls) ? cls.join(" ") : typeof cls === "string" ? cls : "";
    for (const ch of n.children) walk(ch as RootContent, c ? [...classes, c] : classes);
  };
  for (const c of tree.children) walk(c, []);
  if (code.endsWith("\n")) lines.pop();
  return lines;
}

function wrap(text: string, classes: string[], key: number): ReactNode {
  if (classes.length === 0) return <span key={key}>{text}</span>;
  return (
    <span key={key} className={classes.join(" ")}>
      {text}
    </span>
  );
}
