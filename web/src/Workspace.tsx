import { useEffect, useMemo, useRef, useState, type KeyboardEvent as ReactKeyboardEvent } from "react";
import type { FileEntry, WorkspaceFile } from "@agentd/client";
import { useApp } from "./app-context";
import { CodeView } from "./blocks";
import { CopyButton } from "./markdown";

interface TreeNode {
  name: string;
  path: string;
  isDir: boolean;
  size?: number | undefined;
  children: TreeNode[];
}

/** Builds a sorted tree (folders first) from file paths. Exported for tests. */
export function buildTree(entries: readonly { path: string; isDir?: boolean; size?: number | undefined }[]): TreeNode[] {
  const root: TreeNode = { name: "", path: "", isDir: true, children: [] };
  const dirs = new Map<string, TreeNode>([["", root]]);
  const dirOf = (p: string): TreeNode => {
    const have = dirs.get(p);
    if (have) return have;
    const cut = p.lastIndexOf("/");
    const parent = dirOf(cut < 0 ? "" : p.slice(0, cut));
    const node: TreeNode = { name: p.slice(cut + 1), path: p, isDir: true, children: [] };
    parent.children.push(node);
    dirs.set(p, node);
    return node;
  };
  for (const e of entries) {
    const p = e.path.replace(/^\/+|\/+$/g, "");
    if (!p) continue;
    if (e.isDir) {
      dirOf(p);
      continue;
    }
    if (dirs.has(p)) continue;
    const cut = p.lastIndexOf("/");
    const parent = dirOf(cut < 0 ? "" : p.slice(0, cut));
    if (parent.children.some((c) => c.path === p)) continue;
    parent.children.push({ name: p.slice(cut + 1), path: p, isDir: false, size: e.size, children: [] });
  }
  const sort = (n: TreeNode) => {
    n.children.sort((a, b) => (a.isDir !== b.isDir ? (a.isDir ? -1 : 1) : a.name.localeCompare(b.name)));
    n.children.forEach(sort);
  };
  sort(root);
  return root.children;
}

/**
 * The workspace: a file tree kept live by file:* events (the reducer's
 * workspaceFiles) merged with the server's listing, which is refetched
 * shortly after each change, and a viewer for the selected file.
 */
export function Workspace({ sessionId, files }: { sessionId: string; files: readonly WorkspaceFile[] }) {
  const { client } = useApp();
  const [listing, setListing] = useState<FileEntry[] | null>(null);
  const [listErr, setListErr] = useState<string | null>(null);
  const [selected, setSelected] = useState<string | null>(null);
  const [focused, setFocused] = useState<string | null>(null);
  const [open, setOpen] = useState<ReadonlySet<string>>(new Set());
  const timer = useRef<ReturnType<typeof setTimeout> | null>(null);
  const treeRef = useRef<HTMLDivElement>(null);

  useEffect(() => {
    if (timer.current) clearTimeout(timer.current);
    timer.current = setTimeout(() => {
      client
        .listFiles(sessionId)
        .then((l) => {
          setListing(l);
          setListErr(null);
        })
        .catch((e: unknown) => setListErr(e instanceof Error ? e.message : String(e)));
    }, listing === null ? 0 : 300);
    return () => {
      if (timer.current) clearTimeout(timer.current);
    };
  }, [client, sessionId, files]);

  const tree = useMemo(() => {
    // The log's files appear at once; the listing (refetched after each
    // change) adds what predates the log's watch and drops what was deleted.
    return buildTree([...(listing ?? []), ...files.map((f) => ({ path: f.path, size: f.size }))]);
  }, [listing, files]);

  // Top-level folders start open.
  const isOpen = (n: TreeNode, depth: number) => (open.has(n.path) ? true : open.has("!" + n.path) ? false : depth < 1);
  const toggle = (n: TreeNode, depth: number, to?: boolean) =>
    setOpen((cur) => {
      const next = new Set(cur);
      next.delete(n.path);
      next.delete("!" + n.path);
      const want = to ?? !isOpen(n, depth);
      next.add(want ? n.path : "!" + n.path);
      return next;
    });

  // The visible rows in order, for the arrow keys.
  const rows: { node: TreeNode; depth: number; parent: string | null }[] = [];
  const walk = (ns: TreeNode[], depth: number, parent: string | null) => {
    for (const n of ns) {
      rows.push({ node: n, depth, parent });
      if (n.isDir && isOpen(n, depth)) walk(n.children, depth + 1, n.path);
    }
  };
  walk(tree, 0, null);
  const current = focused && rows.some((r) => r.node.path === focused) ? focused : rows[0]?.node.path ?? null;

  const focusRow = (path: string | null) => {
    if (!path) return;
    setFocused(path);
    requestAnimationFrame(() => treeRef.current?.querySelector<HTMLElement>(`[data-row-path="${CSS.escape(path)}"]`)?.focus());
  };

  const onKey = (e: ReactKeyboardEvent<HTMLDivElement>) => {
    const i = rows.findIndex((r) => r.node.path === current);
    if (i < 0) return;
    const r = rows[i]!;
    switch (e.key) {
      case "ArrowDown":
        focusRow(rows[Math.min(rows.length - 1, i + 1)]!.node.path);
        break;
      case "ArrowUp":
        focusRow(rows[Math.max(0, i - 1)]!.node.path);
        break;
      case "Home":
        focusRow(rows[0]!.node.path);
        break;
      case "End":
        focusRow(rows[rows.length - 1]!.node.path);
        break;
      case "ArrowRight":
        if (r.node.isDir && !isOpen(r.node, r.depth)) toggle(r.node, r.depth, true);
        else if (r.node.isDir && r.node.children[0]) focusRow(r.node.children[0].path);
        break;
      case "ArrowLeft":
        if (r.node.isDir && isOpen(r.node, r.depth)) toggle(r.node, r.depth, false);
        else if (r.parent) focusRow(r.parent);
        break;
      case "Enter":
      case " ":
        if (r.node.isDir) toggle(r.node, r.depth);
        else setSelected(r.node.path);
        break;
      default:
        return;
    }
    e.preventDefault();
  };

  const renderNodes = (ns: TreeNode[], depth: number) =>
    ns.map((n) => {
      const expanded = n.isDir ? isOpen(n, depth) : undefined;
      return (
        <div key={n.path} role="none">
          <div
            role="treeitem"
            aria-level={depth + 1}
            aria-expanded={expanded}
            aria-selected={!n.isDir && selected === n.path}
            tabIndex={current === n.path ? 0 : -1}
            className={`tree-row ${n.isDir ? "dir" : "file"}${selected === n.path ? " selected" : ""}`}
            style={{ paddingLeft: 8 + depth * 14 + (n.isDir ? 0 : 12) }}
            data-testid={n.isDir ? "file-dir" : "file-item"}
            data-path={n.path}
            data-row-path={n.path}
            onFocus={() => setFocused(n.path)}
            onClick={() => {
              setFocused(n.path);
              if (n.isDir) toggle(n, depth);
              else setSelected(n.path);
            }}
          >
            {n.isDir ? `${expanded ? "▾" : "▸"} ${n.name}/` : n.name}
            {!n.isDir && n.size !== undefined && <span className="muted small"> {fmtSize(n.size)}</span>}
          </div>
          {n.isDir && expanded && <div role="group">{renderNodes(n.children, depth + 1)}</div>}
        </div>
      );
    });

  return (
    <div className="workspace">
      <div className="file-pane">
        <div className="file-pane-bar small">
          <a className="button-link" href={client.archiveUrl(sessionId, "zip")} download data-testid="download-workspace">
            Download all (.zip)
          </a>
        </div>
        <div ref={treeRef} className="file-tree" data-testid="file-tree" role="tree" aria-label="Workspace files" onKeyDown={onKey}>
          {listErr && <div className="error-box small">{listErr}</div>}
          {tree.length === 0 ? <div className="muted small pad">No files yet.</div> : renderNodes(tree, 0)}
        </div>
      </div>
      <FileViewer sessionId={sessionId} path={selected} version={files.find((f) => f.path === selected)?.sha256 ?? String(files.length)} />
    </div>
  );
}

const VIEW_CAP = 1 << 20;
/** Files shown as images (raster types: nothing in them runs). */
const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

function FileViewer({ sessionId, path, version }: { sessionId: string; path: string | null; version: string }) {
  const { client } = useApp();
  const [content, setContent] = useState<{ text: string; note?: string; binary?: boolean; image?: string } | null>(null);
  const [err, setErr] = useState<string | null>(null);
  useEffect(() => {
    if (!path) return;
    let cancelled = false;
    let imageURL: string | null = null;
    setErr(null);
    client
      .readFile(sessionId, path)
      .then(async (res) => {
        const type = (res.headers.get("Content-Type") ?? "").split(";")[0]!.trim();
        if (IMAGE_TYPES.has(type)) {
          // An image the agent wrote: shown as one (from a blob URL).
          const blob = await res.blob();
          if (cancelled) return;
          imageURL = URL.createObjectURL(blob);
          setContent({ text: "", binary: true, image: imageURL, note: `${type}, ${fmtSize(blob.size)}.` });
          return;
        }
        const buf = new Uint8Array(await res.arrayBuffer());
        if (cancelled) return;
        const head = buf.subarray(0, Math.min(buf.length, 8000));
        if (head.includes(0)) {
          setContent({ text: "", note: `Binary file, ${fmtSize(buf.length)}.`, binary: true });
          return;
        }
        const cut = buf.length > VIEW_CAP;
        setContent({
          text: new TextDecoder().decode(cut ? buf.subarray(0, VIEW_CAP) : buf),
          ...(cut ? { note: `Showing the first ${fmtSize(VIEW_CAP)} of ${fmtSize(buf.length)}.` } : {}),
        });
      })
      .catch((e: unknown) => {
        if (!cancelled) setErr(e instanceof Error ? e.message : String(e));
      });
    return () => {
      cancelled = true;
      if (imageURL) URL.revokeObjectURL(imageURL);
    };
  }, [client, sessionId, path, version]);
  if (!path) return <div className="file-viewer muted">Select a file to view it.</div>;
  const download = async () => {
    const res = await client.readFile(sessionId, path);
    downloadBlob(await res.blob(), path.split("/").pop() || "file");
  };
  return (
    <div className="file-viewer" data-testid="file-viewer" data-path={path}>
      <div className="viewer-head">
        <span>{path}</span>
        <span className="spacer" />
        {content && !content.binary && <CopyButton text={content.text} label="Copy file" />}
        <button type="button" className="linkish" data-testid="download-file" onClick={() => void download()}>
          Download
        </button>
      </div>
      {err ? (
        <div className="error-box" role="alert">
          {err}
        </div>
      ) : (
        <>
          {content?.note && <div className="muted small">{content.note}</div>}
          {content && !content.binary && <CodeView text={content.text} path={path} testId="file-content" />}
          {content?.image && <img className="attachment-image" data-testid="file-image" src={content.image} alt={path} />}
        </>
      )}
    </div>
  );
}

/** Saves a blob under a file name (the browser's download). */
export function downloadBlob(blob: Blob, name: string): void {
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

export function fmtSize(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / (1 << 20)).toFixed(1)} MB`;
}
