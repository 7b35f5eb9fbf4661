// Artifacts in the conversation: images and files a block carries
// (attachments), and long texts the server kept as head + tail with the
// whole text as an artifact (truncated). Artifacts are fetched with the
// client's credentials (a header, not the URL) and shown from blob URLs.
import { useContext, useEffect, useState, type ReactNode } from "react";
import type { AnyBlock, ArtifactRef, Json, Truncation } from "@agentd/client";
import { useApp } from "./app-context";
import { SessionInfoContext } from "./blocks";

/** Media types shown inline as images (what the API accepts and serves inline). */
const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

export function isImage(ref: ArtifactRef): boolean {
  return IMAGE_TYPES.has((ref.contentType ?? "").split(";")[0]!.trim());
}

/**
 * Blob URLs of fetched artifacts, by session and sha256, kept for the page's
 * life: a block scrolled out of the virtualized list and back shows its
 * image at once, without a second request. Artifacts never change.
 */
const blobURLs = new Map<string, Promise<string>>();

function useArtifactURL(sessionId: string, ref: ArtifactRef): { url: string | null; error: string | null } {
  const { client } = useApp();
  const [url, setURL] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    let live = true;
    const key = `${sessionId}/${ref.sha256}`;
    let p = blobURLs.get(key);
    if (!p) {
      p = client
        .artifact(sessionId, ref.sha256)
        .then((r) => r.blob())
        .then((b) => URL.createObjectURL(b));
      blobURLs.set(key, p);
      p.catch(() => blobURLs.delete(key)); // a later view tries again
    }
    p.then(
      (u) => live && setURL(u),
      (e: unknown) => live && setError(e instanceof Error ? e.message : String(e)),
    );
    return () => {
      live = false;
    };
  }, [client, sessionId, ref.sha256]);
  return { url, error };
}

function fmtBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(n < 10 * 1024 ? 1 : 0)} KB`;
  return `${(n / (1024 * 1024)).toFixed(1)} MB`;
}

export function ArtifactImage({ artifact, alt }: { artifact: ArtifactRef; alt: string }) {
  const info = useContext(SessionInfoContext);
  const { url, error } = useArtifactURL(info.sessionId, artifact);
  if (error)
    return (
      <span className="attachment-missing small muted" data-testid="attachment-error" role="note">
        image unavailable: {error}
      </span>
    );
  if (!url) return <span className="attachment-loading" data-testid="attachment-loading" aria-label="loading image" />;
  return (
    <a href={url} target="_blank" rel="noopener noreferrer" className="attachment-link" title={`${alt} (${fmtBytes(artifact.size)})`}>
      <img className="attachment-image" data-testid="attachment-image" data-sha256={artifact.sha256} src={url} alt={alt} />
    </a>
  );
}

function FileChip({ artifact }: { artifact: ArtifactRef }) {
  const info = useContext(SessionInfoContext);
  const { client } = useApp();
  const [err, setErr] = useState<string | null>(null);
  const download = async () => {
    setErr(null);
    try {
      const blob = await (await client.artifact(info.sessionId, artifact.sha256)).blob();
      const u = URL.createObjectURL(blob);
      const a = document.createElement("a");
      a.href = u;
      a.download = (artifact.name ?? artifact.sha256).split("/").pop() ?? "file";
      a.click();
      setTimeout(() => URL.revokeObjectURL(u), 10_000);
    } catch (e) {
      setErr(e instanceof Error ? e.message : String(e));
    }
  };
  return (
    <span className="attachment-file" data-testid="attachment-file">
      <button type="button" className="linkish" onClick={() => void download()} title="Download">
        📄 {artifact.name ?? artifact.sha256.slice(0, 12)}
      </button>{" "}
      <span className="muted small">{fmtBytes(artifact.size)}</span>
      {err && <span className="small error-text"> {err}</span>}
    </span>
  );
}

/** A block's attachments: images inline, files as downloads. */
export function Attachments({ refs, label }: { refs: readonly ArtifactRef[] | undefined; label: string }) {
  if (!refs || refs.length === 0) return null;
  return (
    <div className="attachments" data-testid="attachments">
      {refs.map((r, i) =>
        isImage(r) && !r.name ? (
          <ArtifactImage key={`${r.sha256}-${i}`} artifact={r} alt={`${label} ${i + 1}`} />
        ) : (
          <FileChip key={`${r.sha256}-${i}`} artifact={r} />
        ),
      )}
    </div>
  );
}

const utf8 = new TextEncoder();

/** The truncation of the block's field, when the server cut it. */
export function truncationOf(block: AnyBlock | undefined, field: "output" | "content" | "input"): Truncation | undefined {
  const t = block?.truncated;
  return t && t.field === field ? t : undefined;
}

/**
 * A text the server kept as head + tail: the head, "… N bytes omitted …"
 * and the tail, with "Show all", which loads the whole text from its
 * artifact by ranges (a progress figure while it loads) and shows it.
 */
export function TruncatedText({
  head,
  truncation,
  render,
}: {
  head: string;
  truncation: Truncation;
  render: (text: string, part: "head" | "tail" | "full") => ReactNode;
}) {
  const info = useContext(SessionInfoContext);
  const { client } = useApp();
  const [full, setFull] = useState<string | null>(null);
  const [progress, setProgress] = useState<number | null>(null);
  const [err, setErr] = useState<string | null>(null);
  const art = truncation.artifact;
  const omitted = Math.max(0, truncation.totalBytes - utf8.encode(head).length - utf8.encode(truncation.tail).length);
  if (full !== null) return <div data-testid="truncated-full">{render(full, "full")}</div>;
  const load = async () => {
    if (!art) return;
    setErr(null);
    setProgress(0);
    try {
      const bytes = await client.fetchArtifact(info.sessionId, art, { chunkSize: 256 * 1024, onProgress: (n, total) => setProgress(total ? n / total : 1) });
      setFull(new TextDecoder().decode(bytes));
    } catch (e) {
      setErr(e instanceof Error ? e.message : String(e));
    } finally {
      setProgress(null);
    }
  };
  return (
    <div className="truncated" data-testid="truncated">
      {render(head, "head")}
      <div className="omitted small" data-testid="omitted">
        <span>… {omitted.toLocaleString()} bytes omitted …</span>{" "}
        {art ? (
          <button type="button" className="linkish" data-testid="show-all" disabled={progress !== null} onClick={() => void load()}>
            {progress !== null ? `Loading… ${Math.round(progress * 100)}%` : `Show all (${fmtBytes(truncation.totalBytes)})`}
          </button>
        ) : (
          <span className="muted">{truncation.artifactError ? `the whole text was not kept: ${truncation.artifactError}` : "the whole text is kept when the block completes"}</span>
        )}
        {err && (
          <span className="error-text" role="alert">
            {" "}
            {err}
          </span>
        )}
      </div>
      {render(truncation.tail, "tail")}
    </div>
  );
}

/**
 * The truncation of a tool_use block's input when the server bounded it
 * (long strings cut around "… [N bytes omitted] …"): undefined when the
 * input is whole (a truncation without artifact or error says a short
 * input replaced a bounded one).
 */
export function inputTruncationOf(block: AnyBlock | undefined): Truncation | undefined {
  const t = truncationOf(block, "input");
  return t && (t.artifact || t.artifactError) ? t : undefined;
}

/**
 * The note under a tool input the server kept bounded: its full size and
 * "show all", which loads the whole input (JSON) from its artifact and
 * hands it to onFull.
 */
export function TruncatedInputNote({ truncation, onFull }: { truncation: Truncation; onFull: (input: Json) => void }) {
  const info = useContext(SessionInfoContext);
  const { client } = useApp();
  const [progress, setProgress] = useState<number | null>(null);
  const [err, setErr] = useState<string | null>(null);
  const art = truncation.artifact;
  const load = async () => {
    if (!art) return;
    setErr(null);
    setProgress(0);
    try {
      const bytes = await client.fetchArtifact(info.sessionId, art, { chunkSize: 256 * 1024, onProgress: (n, total) => setProgress(total ? n / total : 1) });
      onFull(JSON.parse(new TextDecoder().decode(bytes)) as Json);
    } catch (e) {
      setErr(e instanceof Error ? e.message : String(e));
    } finally {
      setProgress(null);
    }
  };
  return (
    <div className="omitted small" data-testid="input-truncated" role="note">
      <span>input truncated: {fmtBytes(truncation.totalBytes)}</span>
      {" — "}
      {art ? (
        <button type="button" className="linkish" data-testid="show-all-input" disabled={progress !== null} onClick={() => void load()}>
          {progress !== null ? `Loading… ${Math.round(progress * 100)}%` : "show all"}
        </button>
      ) : (
        <span className="muted">the whole input was not kept: {truncation.artifactError}</span>
      )}
      {err && (
        <span className="error-text" role="alert">
          {" "}
          {err}
        </span>
      )}
    </div>
  );
}
