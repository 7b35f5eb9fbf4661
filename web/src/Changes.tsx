// The Changes view: what the agent changed in the workspace, per turn and
// overall, as diffs of the snapshots the server takes before each turn;
// with downloads of a changed file and of the whole workspace.
import { useEffect, useMemo, useState } from "react";
import type { AnyBlock, ChangedFile, SessionChanges, Turn } from "@agentd/client";
import { useApp } from "./app-context";
import { DiffView } from "./blocks";
import { fmtSize, downloadBlob } from "./Workspace";

const MAX_DIFF_BYTES = 512 * 1024;

export function Changes({ sessionId, turns, running, blocks }: { sessionId: string; turns: readonly Turn[]; running: boolean; blocks: readonly AnyBlock[] }) {
  const { client } = useApp();
  const [data, setData] = useState<SessionChanges | null>(null);
  const [err, setErr] = useState<string | null>(null);
  const [scope, setScope] = useState<string>("all");
  const ended = turns.filter((t) => t.status !== "running").length;

  // Refetched when a turn ends (and on opening).
  useEffect(() => {
    let cancelled = false;
    client
      .getChanges(sessionId)
      .then((c) => {
        if (!cancelled) {
          setData(c);
          setErr(null);
        }
      })
      .catch((e: unknown) => !cancelled && setErr(e instanceof Error ? e.message : String(e)));
    return () => {
      cancelled = true;
    };
  }, [client, sessionId, ended]);

  const prompts = useMemo(() => {
    const m = new Map<string, string>();
    for (const b of blocks) if (b.type === "user_message" && b.id.endsWith("-user")) m.set(b.id.slice(0, -5), b.content ?? "");
    return m;
  }, [blocks]);

  const files: ChangedFile[] = !data ? [] : scope === "all" ? data.overall : data.turns.find((t) => t.queryId === scope)?.files ?? [];
  return (
    <div className="changes" data-testid="changes">
      <div className="changes-bar">
        <label className="small">
          Show{" "}
          <select data-testid="changes-scope" value={scope} onChange={(e) => setScope(e.target.value)}>
            <option value="all">All changes of the session</option>
            {data?.turns.map((t, i) => (
              <option key={t.queryId} value={t.queryId}>
                Turn {i + 1}: {(prompts.get(t.queryId) ?? t.queryId).slice(0, 60)} ({t.files.length} file{t.files.length === 1 ? "" : "s"})
              </option>
            ))}
          </select>
        </label>
        <span className="spacer" />
        <a className="button-link" href={client.archiveUrl(sessionId, "zip")} download data-testid="download-zip">
          Download workspace (.zip)
        </a>
        <a className="button-link" href={client.archiveUrl(sessionId, "tar.gz")} download data-testid="download-tar">
          .tar.gz
        </a>
      </div>
      {running && <div className="muted small pad">A turn is running: its changes show when it ends.</div>}
      {err && (
        <div className="error-box" role="alert">
          {err}
        </div>
      )}
      {!data && !err && <div className="muted pad">Loading…</div>}
      {data && files.length === 0 && (
        <div className="muted pad" data-testid="no-changes">
          {data.turns.length === 0 ? "No turn has run yet." : "No changes."}
        </div>
      )}
      {data && files.length > 0 && (
        <>
          <ul className="change-list" aria-label="Changed files">
            {files.map((f) => (
              <li key={f.path}>
                <a href={`#change-${cssId(f.path)}`} data-testid="change-item" data-path={f.path} data-change={f.change}>
                  <span className={`change-badge change-${f.change}`} title={f.change}>
                    {f.change === "added" ? "A" : f.change === "deleted" ? "D" : "M"}
                  </span>{" "}
                  {f.path}
                </a>
              </li>
            ))}
          </ul>
          {files.map((f) => (
            <FileChange key={`${scope}:${f.path}`} sessionId={sessionId} file={f} />
          ))}
        </>
      )}
    </div>
  );
}

function cssId(p: string): string {
  return p.replace(/[^A-Za-z0-9_-]/g, "_");
}

function FileChange({ sessionId, file }: { sessionId: string; file: ChangedFile }) {
  const { client } = useApp();
  const [texts, setTexts] = useState<{ before: string; after: string } | null>(null);
  const [note, setNote] = useState<string | null>(null);
  useEffect(() => {
    let cancelled = false;
    const get = async (sha: string | undefined, size: number | undefined): Promise<string | null> => {
      if (size === undefined) return "";
      if (!sha) return null;
      if (size > MAX_DIFF_BYTES) return null;
      const buf = new Uint8Array(await (await client.changedContent(sessionId, sha)).arrayBuffer());
      if (buf.subarray(0, 8000).includes(0)) return null;
      return new TextDecoder().decode(buf);
    };
    Promise.all([get(file.before?.sha256, file.before?.size), get(file.after?.sha256, file.after?.size)])
      .then(([before, after]) => {
        if (cancelled) return;
        if (before === null || after === null) setNote("Binary or large file: no diff shown.");
        else setTexts({ before, after });
      })
      .catch((e: unknown) => !cancelled && setNote(e instanceof Error ? e.message : String(e)));
    return () => {
      cancelled = true;
    };
  }, [client, sessionId, file]);
  const download = async () => {
    if (!file.after?.sha256) return;
    const res = await client.changedContent(sessionId, file.after.sha256);
    downloadBlob(await res.blob(), file.path.split("/").pop() || "file");
  };
  return (
    <section className="file-change" id={`change-${cssId(file.path)}`} data-testid="file-change" data-path={file.path} aria-label={`${file.change} ${file.path}`}>
      <div className="file-change-head">
        <span className={`change-badge change-${file.change}`}>{file.change}</span>
        <span className="mono">{file.path}</span>
        <span className="muted small">
          {file.before ? fmtSize(file.before.size) : "—"} → {file.after ? fmtSize(file.after.size) : "deleted"}
        </span>
        {file.after?.sha256 && (
          <button type="button" className="linkish" data-testid="download-file" onClick={() => void download()}>
            Download
          </button>
        )}
      </div>
      {note && <div className="muted small pad">{note}</div>}
      {texts && <DiffView edit={{ path: file.path, oldText: texts.before, newText: texts.after, whole: true }} testId="change-diff" />}
    </section>
  );
}
