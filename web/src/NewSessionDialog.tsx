import { useEffect, useRef, useState } from "react";
import type { AgentdClient, AgentProfileSummary, Architecture } from "@agentd/client";
import { useApp } from "./app-context";

// GET /api/architectures can take seconds (the server asks each agent CLI
// for its version), so the app asks once at start and the dialog reuses it.
const archCache = new WeakMap<AgentdClient, Promise<Architecture[]>>();

export function prefetchArchitectures(client: AgentdClient): Promise<Architecture[]> {
  let p = archCache.get(client);
  if (!p) {
    p = client.listArchitectures();
    p.catch(() => archCache.delete(client)); // retry on the next open
    archCache.set(client, p);
  }
  return p;
}

export function NewSessionDialog({ onClose, onCreated }: { onClose: () => void; onCreated: (id: string) => void }) {
  const { client } = useApp();
  const [profiles, setProfiles] = useState<AgentProfileSummary[]>([]);
  const [archs, setArchs] = useState<Architecture[]>([]);
  const [archsLoaded, setArchsLoaded] = useState(false);
  const [profile, setProfile] = useState("default");
  const [arch, setArch] = useState("");
  const [model, setModel] = useState("");
  const [name, setName] = useState("");
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState<string | null>(null);
  const first = useRef<HTMLSelectElement>(null);

  useEffect(() => {
    first.current?.focus();
    const fail = (e: unknown) => setErr(e instanceof Error ? e.message : String(e));
    client
      .listProfiles()
      .then((p) => {
        setProfiles(p);
        if (p.length && !p.some((x) => x.id === "default")) setProfile(p[0]!.id);
      })
      .catch(fail);
    prefetchArchitectures(client)
      .then((a) => {
        setArchs(a);
        setArchsLoaded(true);
        const preferred = a.find((x) => x.available && x.name !== "shell") ?? a.find((x) => x.available);
        if (preferred) setArch((cur) => cur || preferred.name);
      })
      .catch(fail);
  }, [client]);

  const create = async () => {
    setBusy(true);
    setErr(null);
    try {
      const r = await client.createSession({
        agentProfileRef: profile,
        ...(arch ? { architecture: arch } : {}),
        ...(model.trim() ? { sessionOptions: { model: model.trim() } } : {}),
        ...(name.trim() ? { name: name.trim() } : {}),
      });
      onCreated(r.sessionId);
    } catch (e) {
      setErr(e instanceof Error ? e.message : String(e));
      setBusy(false);
    }
  };

  return (
    <div className="modal-backdrop" onMouseDown={(e) => e.target === e.currentTarget && onClose()}>
      <form
        className="modal"
        role="dialog"
        aria-modal="true"
        aria-labelledby="new-session-title"
        data-testid="new-session-dialog"
        onKeyDown={(e) => e.key === "Escape" && onClose()}
        onSubmit={(e) => {
          e.preventDefault();
          void create();
        }}
      >
        <h2 id="new-session-title">New session</h2>
        <label>
          Profile
          <select ref={first} data-testid="profile-select" value={profile} onChange={(e) => setProfile(e.target.value)}>
            {profiles.length === 0 && <option value="default">default</option>}
            {profiles.map((p) => (
              <option key={p.id} value={p.id} title={p.description}>
                {p.name || p.id}
              </option>
            ))}
          </select>
        </label>
        <label>
          Architecture
          <select data-testid="architecture-select" value={arch} onChange={(e) => setArch(e.target.value)} aria-busy={!archsLoaded}>
            {!archsLoaded && <option value="">Loading…</option>}
            {archs.map((a) => (
              <option key={a.name} value={a.name} disabled={!a.available}>
                {a.name}
                {a.version ? ` ${a.version}` : ""}
                {a.available ? "" : " (not installed)"}
              </option>
            ))}
          </select>
        </label>
        <label>
          <span>
            Model <span className="muted small">(optional)</span>
          </span>
          <input data-testid="model-input" value={model} onChange={(e) => setModel(e.target.value)} placeholder="agent default" />
        </label>
        <label>
          <span>
            Name <span className="muted small">(optional)</span>
          </span>
          <input data-testid="name-input" value={name} onChange={(e) => setName(e.target.value)} />
        </label>
        {err && (
          <div className="error-box small" role="alert">
            {err}
          </div>
        )}
        <div className="modal-actions">
          <button type="button" onClick={onClose}>
            Cancel
          </button>
          <button type="submit" className="primary" data-testid="create-session" disabled={busy || !arch}>
            Create
          </button>
        </div>
      </form>
    </div>
  );
}
