// Line diffs for Edit/Write-style tool calls.

export type DiffLine = { op: " " | "-" | "+"; text: string };

const MAX_CELLS = 4_000_000; // LCS table budget; beyond it, show old then new

/** The lines of s; a final newline ends the last line rather than starting an empty one. */
function splitLines(s: string): string[] {
  if (s === "") return [];
  return (s.endsWith("\n") ? s.slice(0, -1) : s).split("\n");
}

/** A line diff of a and b (LCS); for very large inputs, all-removed then all-added. */
export function diffLines(a: string, b: string): DiffLine[] {
  const x = splitLines(a);
  const y = splitLines(b);
  // Trim the common prefix and suffix: most edits touch a few lines.
  let pre = 0;
  while (pre < x.length && pre < y.length && x[pre] === y[pre]) pre++;
  let suf = 0;
  while (suf < x.length - pre && suf < y.length - pre && x[x.length - 1 - suf] === y[y.length - 1 - suf]) suf++;
  const xs = x.slice(pre, x.length - suf);
  const ys = y.slice(pre, y.length - suf);
  const out: DiffLine[] = x.slice(0, pre).map((text) => ({ op: " ", text }));
  if ((xs.length + 1) * (ys.length + 1) > MAX_CELLS) {
    for (const t of xs) out.push({ op: "-", text: t });
    for (const t of ys) out.push({ op: "+", text: t });
  } else {
    const n = xs.length;
    const m = ys.length;
    const w = m + 1;
    const L = new Uint32Array((n + 1) * w);
    for (let i = n - 1; i >= 0; i--)
      for (let j = m - 1; j >= 0; j--)
        L[i * w + j] = xs[i] === ys[j] ? L[(i + 1) * w + j + 1]! + 1 : Math.max(L[(i + 1) * w + j]!, L[i * w + j + 1]!);
    let i = 0;
    let j = 0;
    while (i < n && j < m) {
      if (xs[i] === ys[j]) {
        out.push({ op: " ", text: xs[i]! });
        i++;
        j++;
      } else if (L[(i + 1) * w + j]! >= L[i * w + j + 1]!) out.push({ op: "-", text: xs[i++]! });
      else out.push({ op: "+", text: ys[j++]! });
    }
    while (i < n) out.push({ op: "-", text: xs[i++]! });
    while (j < m) out.push({ op: "+", text: ys[j++]! });
  }
  for (const t of x.slice(x.length - suf)) out.push({ op: " ", text: t });
  return out;
}

export interface FileEdit {
  path?: string;
  oldText: string;
  newText: string;
  /** Both texts are whole files (their line numbers are the file's). */
  whole?: boolean;
}

function str(v: unknown): string | undefined {
  return typeof v === "string" ? v : undefined;
}

/**
 * The edits a tool call makes, when its input has a recognisable shape:
 * old_string/new_string (Edit), edits[] (MultiEdit), content (Write), or
 * the camelCase variants other agents use. Otherwise null.
 */
export function editsOf(input: unknown): FileEdit[] | null {
  if (!input || typeof input !== "object" || Array.isArray(input)) return null;
  const o = input as Record<string, unknown>;
  const path = str(o.file_path) ?? str(o.filePath) ?? str(o.path) ?? str(o.notebook_path);
  const oldS = str(o.old_string) ?? str(o.oldString) ?? str(o.old_str);
  const newS = str(o.new_string) ?? str(o.newString) ?? str(o.new_str);
  if (newS !== undefined && oldS !== undefined) return [{ ...(path ? { path } : {}), oldText: oldS, newText: newS }];
  if (Array.isArray(o.edits)) {
    const edits = o.edits
      .filter((e): e is Record<string, unknown> => !!e && typeof e === "object")
      .map((e) => ({ ...(path ? { path } : {}), oldText: str(e.old_string) ?? str(e.oldString) ?? "", newText: str(e.new_string) ?? str(e.newString) ?? "" }));
    return edits.length ? edits : null;
  }
  const content = str(o.content) ?? str(o.new_source);
  if (content !== undefined && path) return [{ path, oldText: "", newText: content }];
  return null;
}
