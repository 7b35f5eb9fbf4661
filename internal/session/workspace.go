package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
)

// WorkspaceSource is sessionOptions.workspace: where a new session's
// workspace files come from. Empty: an empty workspace (plus the profile's
// default files). Git: the repository is cloned into the workspace, inside
// the sandbox, when the environment first starts.
type WorkspaceSource struct {
	Git    string `json:"git,omitempty"`
	Branch string `json:"branch,omitempty"`
}

var (
	branchRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$`)
	// scpLikeRE is git's "user@host:path" form.
	scpLikeRE = regexp.MustCompile(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^-]`)
)

// gitProtocols are the transports a clone may use (git's ext:: and fd::
// helpers run commands, so they stay off).
const gitProtocols = "file:git:http:https:ssh"

// workspaceSource reads and checks sessionOptions.workspace.
func workspaceSource(opts json.RawMessage) (WorkspaceSource, error) {
	var o struct {
		Workspace *WorkspaceSource `json:"workspace"`
	}
	if len(opts) == 0 {
		return WorkspaceSource{}, nil
	}
	if err := json.Unmarshal(opts, &o); err != nil {
		return WorkspaceSource{}, fmt.Errorf("%w: sessionOptions.workspace must be {\"git\": URL, \"branch\"?: name}", ErrInvalidRequest)
	}
	if o.Workspace == nil {
		return WorkspaceSource{}, nil
	}
	w := *o.Workspace
	w.Git, w.Branch = strings.TrimSpace(w.Git), strings.TrimSpace(w.Branch)
	if w.Git == "" {
		if w.Branch != "" {
			return WorkspaceSource{}, fmt.Errorf("%w: sessionOptions.workspace.branch needs a git URL", ErrInvalidRequest)
		}
		return WorkspaceSource{}, nil
	}
	if err := checkGitURL(w.Git); err != nil {
		return WorkspaceSource{}, fmt.Errorf("%w: sessionOptions.workspace.git: %v", ErrInvalidRequest, err)
	}
	if w.Branch != "" && (!branchRE.MatchString(w.Branch) || strings.Contains(w.Branch, "..")) {
		return WorkspaceSource{}, fmt.Errorf("%w: sessionOptions.workspace.branch %q is not a branch name", ErrInvalidRequest, w.Branch)
	}
	return w, nil
}

func checkGitURL(raw string) error {
	if strings.HasPrefix(raw, "-") || strings.ContainsAny(raw, "\x00\n\r") {
		return fmt.Errorf("%q is not a repository URL", raw)
	}
	if scpLikeRE.MatchString(raw) {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %v", raw, err)
	}
	switch u.Scheme {
	case "https", "http", "ssh", "git":
		if u.Host == "" {
			return fmt.Errorf("%q has no host", raw)
		}
	case "file":
		if u.Path == "" {
			return fmt.Errorf("%q has no path", raw)
		}
	default:
		return fmt.Errorf("%q: want an https, http, ssh, git or file URL, or user@host:path", raw)
	}
	return nil
}

// cloneScript clones $1 (branch $2 when set) into the workspace: into a
// temporary folder first, since the workspace may already hold agentd's
// own files, then moved in.
const cloneScript = `set -e
tmp=.agentd-clone.$$
trap 'rm -rf "$tmp"' EXIT
if [ -n "$2" ]; then
  git clone --quiet --branch "$2" -- "$1" "$tmp"
else
  git clone --quiet -- "$1" "$tmp"
fi
cp -a "$tmp"/. .
`

// cloneWorkspace clones src into a new environment's workspace, through
// the environment's exec (so it runs as the session, inside its sandbox).
func cloneWorkspace(ctx context.Context, e sandbox.Environment, src WorkspaceSource) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	p, err := e.Exec(ctx, sandbox.Cmd{
		Argv: []string{"sh", "-c", cloneScript, "sh", src.Git, src.Branch},
		Env:  map[string]string{"GIT_ALLOW_PROTOCOL": gitProtocols, "GIT_TERMINAL_PROMPT": "0"},
	})
	if err != nil {
		return agent.Fail(agent.CodeSandboxError, "clone %s: start git: %v", src.Git, err)
	}
	var out strings.Builder
	for c := range p.Output() {
		if out.Len() < 8<<10 {
			out.Write(c.Data)
		}
	}
	st, err := p.Wait(ctx)
	if err != nil {
		return agent.Fail(agent.CodeSandboxError, "clone %s: %v", src.Git, err)
	}
	if !st.Success() {
		msg := strings.TrimSpace(out.String())
		if msg == "" {
			msg = fmt.Sprintf("git exited with %d", st.Code)
		}
		return agent.Fail(agent.CodeSandboxError, "clone %s: %s", src.Git, msg)
	}
	return nil
}

// gitCeiling is GIT_CEILING_DIRECTORIES for a session's processes: git
// run in a workspace never finds a repository above it (such as a checkout
// the data folder sits in), only one the session made or cloned.
func (m *Manager) gitCeiling(id string) string {
	return filepath.Dir(m.workspace(id))
}

// populateFrom fills a new workspace from its session's source (a git
// clone), unless the store holds saved files for it (a workspace restored
// elsewhere: populate writes those).
func (m *Manager) populateFrom(ctx context.Context, e sandbox.Environment, rec store.Session) error {
	src, err := workspaceSource(rec.SessionOptions)
	if err != nil || src.Git == "" {
		return nil // checked at creation
	}
	saved, err := m.cfg.Store.ListWorkspaceFiles(ctx, rec.ID)
	if err != nil {
		return fmt.Errorf("list saved files: %w", err)
	}
	if len(saved) > 0 {
		return nil
	}
	m.log.Info("cloning workspace", "session", rec.ID, "git", src.Git, "branch", src.Branch)
	return cloneWorkspace(ctx, e, src)
}

// checkAgent refuses an architecture whose agent CLI is not installed, so
// a session fails at creation rather than at its first message. (A CLI that
// is there but broken still fails the turn, with what it printed.)
func (m *Manager) checkAgent(ctx context.Context, arch string) error {
	if !m.cfg.RefuseMissingAgents {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := m.cfg.Architectures.Check(ctx, arch); errors.Is(err, agent.ErrNotInstalled) {
		return fmt.Errorf("%w: %s: %v (scripts/setup.sh installs the pinned agent CLIs)", ErrAgentNotFound, arch, err)
	}
	return nil
}
