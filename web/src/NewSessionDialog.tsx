import { useEffect, useState } from "react";
import type { AgentdClient, AgentProfileSummary, Architecture, Json } from "@agentd/client";
import { useApp } from "./app-context";
import { Dialog } from "./Dialog";

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

/** Claude Code's permission modes (sessionOptions.permissionMode). */
const PERMISSION_MODES: { value: string; label: string }[] = [
  { value: "", label: "Ask before running tools (default)" },
  { value: "acceptEdits", label: "Accept file edits, ask for the rest" },
  { value: "plan", label: "Plan only: no changes" },
  { value: "bypassPermissions", label: "Never ask (not as root)" },
];

const MODEL_HINTS: Record<string, string[]> = {
  "claude-code": ["claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5"],
  codex: ["gpt-5", "gpt-5-codex"],
  "gemini-cli": ["gemini-2.5-pro", "gemini-2.5-flash"],
  opencode: [],
  shell: [],
};

export function NewSessionDialog({ onClose, onCreated }: { onClose: () => void; onCreated: (id: string) => void }) {
  const { client } = useApp();
  const [profiles, setProfiles] = useState<AgentProfileSummary[]>([]);
  const [archs, setArchs] = useState<Architecture[]>([]);
  const [archsLoaded, setArchsLoaded] = useState(false);
  const [profile, setProfile] = useState("default");
  const [arch, setArch] = useState("");
  const [model, setModel] = useState("");
  const [mode, setMode] = useState("");
  const [name, setName] = useState("");
  const [prompt, setPrompt] = useState("");
  const [source, setSource] = useState<"empty" | "git">("empty");
  const [gitUrl, setGitUrl] = useState("");
  const [branch, setBranch] = useState("");
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState<string | null>(null);

  useEffect(() => {
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
      const opts: Record<string, Json> = {};
      if (model.trim()) opts.model = model.trim();
      if (mode && arch === "claude-code") opts.permissionMode = mode;
      if (source === "git" && gitUrl.trim()) opts.workspace = { git: gitUrl.trim(), ...(branch.trim() ? { branch: branch.trim() } : {}) };
      const r = await client.createSession({
        agentProfileRef: profile,
        ...(arch ? { architecture: arch } : {}),
        ...(Object.keys(opts).length ? { sessionOptions: opts } : {}),
        ...(name.trim() ? { name: name.trim() } : {}),
      });
      if (prompt.trim()) await client.sendMessage(r.sessionId, prompt.trim());
      onCreated(r.sessionId);
    } catch (e) {
      setErr(e instanceof Error ? e.message : String(e));
      setBusy(false);
    }
  };

  const selected = archs.find((a) => a.name === arch);
  return (
    <Dialog title="New session" onClose={onClose} onSubmit={() => void create()} testId="new-session-dialog" wide>
      <div className="form-grid">
        <label>
          Profile
          <select data-testid="profile-select" value={profile} onChange={(e) => setProfile(e.target.value)}>
            {profiles.length === 0 && <option value="default">default</option>}
            {profiles.map((p) => (
              <option key={p.id} value={p.id} title={p.description}>
                {p.name || p.id}
              </option>
            ))}
          </select>
        </label>
        <label>
          Agent
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
          <input data-testid="model-input" value={model} onChange={(e) => setModel(e.target.value)} placeholder="the agent's default" list="model-hints" />
          <datalist id="model-hints">
            {(MODEL_HINTS[arch] ?? []).map((m) => (
              <option key={m} value={m} />
            ))}
          </datalist>
        </label>
        {arch === "claude-code" ? (
          <label>
            Permissions
            <select data-testid="permission-mode" value={mode} onChange={(e) => setMode(e.target.value)}>
              {PERMISSION_MODES.map((m) => (
                <option key={m.value} value={m.value}>
                  {m.label}
                </option>
              ))}
            </select>
          </label>
        ) : (
          <div className="muted small field-note">{arch === "shell" ? "The shell runs each message as a command." : "Permissions follow the profile's allowed tools."}</div>
        )}
      </div>
      {selected && !selected.available && selected.problem && <div className="error-box small">{selected.problem}</div>}
      <fieldset className="source">
        <legend>Workspace</legend>
        <label className="check">
          <input type="radio" name="source" value="empty" checked={source === "empty"} onChange={() => setSource("empty")} data-testid="source-empty" /> Empty
        </label>
        <label className="check">
          <input type="radio" name="source" value="git" checked={source === "git"} onChange={() => setSource("git")} data-testid="source-git" /> Clone a git repository
        </label>
        {source === "git" && (
          <div className="form-grid">
            <label>
              Repository URL
              <input data-testid="git-url" value={gitUrl} onChange={(e) => setGitUrl(e.target.value)} placeholder="https://github.com/owner/repo.git" required />
            </label>
            <label>
              <span>
                Branch <span className="muted small">(optional)</span>
              </span>
              <input data-testid="git-branch" value={branch} onChange={(e) => setBranch(e.target.value)} placeholder="the default branch" />
            </label>
          </div>
        )}
      </fieldset>
      <label>
        <span>
          First message <span className="muted small">(optional; also names the session)</span>
        </span>
        <textarea data-testid="first-prompt" rows={3} value={prompt} onChange={(e) => setPrompt(e.target.value)} placeholder="What should the agent do?" />
      </label>
      <label>
        <span>
          Name <span className="muted small">(optional)</span>
        </span>
        <input data-testid="name-input" value={name} onChange={(e) => setName(e.target.value)} />
      </label>
      {err && (
        <div className="error-box small" role="alert" data-testid="new-session-error">
          {err}
        </div>
      )}
      <div className="modal-actions">
        <button type="button" onClick={onClose}>
          Cancel
        </button>
        <button type="submit" className="primary" data-testid="create-session" disabled={busy || !arch}>
          {prompt.trim() ? "Create and send" : "Create"}
        </button>
      </div>
    </Dialog>
  );
}
