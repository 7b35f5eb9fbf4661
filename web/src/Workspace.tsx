import { useEffect, useMemo, useRef, useState } from "react";
import type { FileEntry, WorkspaceFile } from "@agentd/client";
import { useApp } from "./app-context";

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
  const timer = useRef<ReturnType<typeof setTimeout> | null>(null);

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

  return (
    <div className="workspace">
      <div className="file-tree" data-testid="file-tree" role="tree" aria-label="Workspace files">
        {listErr && <div className="error-box small">{listErr}</div>}
        {tree.length === 0 ? <div className="muted small">No files yet.</div> : tree.map((n) => <TreeItem key={n.path} node={n} selected={selected} onSelect={setSelected} depth={0} />)}
      </div>
      <FileViewer sessionId={sessionId} path={selected} version={files.find((f) => f.path === selected)?.sha256 ?? String(files.length)} />
    </div>
  );
}

function TreeItem({ node, selected, onSelect, depth }: { node: TreeNode; selected: string | null; onSelect: (p: string) => void; depth: number }) {
  const [open, setOpen] = useState(depth < 1);
  if (node.isDir) {
    return (
      <div role="treeitem" aria-expanded={open} aria-selected={false}>
        <button type="button" className="tree-row dir" style={{ paddingLeft: 8 + depth * 14 }} onClick={() => setOpen(!open)} data-testid="file-dir" data-path={node.path}>
          {open ? "▾" : "▸"} {node.name}/
        </button>
        {open && (
          <div role="group">
            {node.children.map((c) => (
              <TreeItem key={c.path} node={c} selected={selected} onSelect={onSelect} depth={depth + 1} />
            ))}
          </div>
        )}
      </div>
    );
  }
  return (
    <div role="treeitem" aria-selected={selected === node.path}>
      <button
        type="button"
        className={`tree-row file${selected === node.path ? " selected" : ""}`}
        style={{ paddingLeft: 8 + depth * 14 + 12 }}
        onClick={() => onSelect(node.path)}
        data-testid="file-item"
        data-path={node.path}
      >
        {node.name}
        {node.size !== undefined && <span className="muted small"> {fmtSize(node.size)}</span>}
      </button>
    </div>
  );
}

const VIEW_CAP = 1 << 20;

function FileViewer({ sessionId, path, version }: { sessionId: string; path: string | null; version: string }) {
  const { client } = useApp();
  const [content, setContent] = useState<{ text: string; note?: string } | null>(null);
  const [err, setErr] = useState<string | null>(null);
  useEffect(() => {
    if (!path) return;
    let cancelled = false;
    setErr(null);
    client
      .readFile(sessionId, path)
      .then(async (res) => {
        const buf = new Uint8Array(await res.arrayBuffer());
        if (cancelled) return;
        const head = buf.subarray(0, Math.min(buf.length, 8000));
        if (head.includes(0)) {
          setContent({ text: "", note: `Binary file, ${fmtSize(buf.length)}.` });
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
    };
  }, [client, sessionId, path, version]);
  if (!path) return <div className="file-viewer muted">Select a file to view it.</div>;
  return (
    <div className="file-viewer" data-testid="file-viewer" data-path={path}>
      <div className="viewer-head">{path}</div>
      {err ? (
        <div className="error-box" role="alert">
          {err}
        </div>
      ) : (
        <>
          {content?.note && <div className="muted small">{content.note}</div>}
          <pre className="file-content">{content?.text}</pre>
        </>
      )}
    </div>
  );
}

function fmtSize(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / (1 << 20)).toFixed(1)} MB`;
}
