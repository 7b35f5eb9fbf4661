// Package agent defines how agentd drives an agent: an Architecture starts a
// Runner for a session inside its sandbox, and the Runner turns user messages
// into conversation events through the Host the session gives it. It is
// public so that a program embedding agentd can add architectures of its
// own (agentd.Config.Architectures; agent/agenttest is their conformance
// suite). The built-in architectures live in internal/agent/, one
// sub-package each (shell/, claudecode/, codex/, gemini/, opencode/) with
// its command line and its converter.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/sandbox"
)

// ErrInterrupted is returned by Runner.Turn when the turn ended because of
// Interrupt.
var ErrInterrupted = errors.New("agent: turn interrupted")

// Architecture is one kind of agent.
type Architecture interface {
	// Name is the canonical architecture name (e.g. "claude-code").
	Name() string
	// Start prepares a runner for a session whose environment is up:
	// materialises the profile into the workspace and checks the agent is
	// there. It may start a long-lived agent process or defer that to the
	// first turn.
	Start(ctx context.Context, host Host) (Runner, error)
}

// Runner runs turns of one session, one at a time. Turn (and
// Resumer.Resume) runs in a job goroutine of its own while the session's
// owner goroutine goes on serving the session; Interrupt comes from yet
// another goroutine while a Turn runs (or as it ends); Close comes from the
// owner goroutine when no Turn runs, and is the last call. The optional
// abilities below say when they may be called.
type Runner interface {
	// Turn sends one user message and emits the agent's events through the
	// host until the turn ends. It returns ErrInterrupted (possibly wrapped)
	// when Interrupt ended it, another error when it failed.
	Turn(ctx context.Context, t Turn) (TurnResult, error)
	// Interrupt asks the running turn to stop (escalating as the
	// architecture needs); Turn then returns.
	Interrupt(ctx context.Context) error
	// Close stops the agent's processes. The runner is not used again.
	Close(ctx context.Context) error
}

// Turn is one user message.
type Turn struct {
	// QueryID identifies the turn ("q<n>"); block ids the session creates for
	// it derive from it.
	QueryID string
	Content string
	// Images are the images the user sent with the message, in order,
	// before the text; only a runner whose architecture is an
	// ImageAccepter gets any.
	Images []Image
}

// Image is an image of a user message: its bytes (a few MiB at most, as
// the API limits them), media type and artifact.
type Image struct {
	// MediaType is "image/png", "image/jpeg", "image/gif" or "image/webp".
	MediaType string
	Data      []byte
	// SHA256 names the image in the session's artifact store.
	SHA256 string
}

// ArtifactPutter is implemented by hosts whose store keeps artifacts: a
// runner stores content an event references (an image a tool returned)
// with PutArtifact before it emits the event, so the log holds the ref,
// never the bytes. meta's ContentType and Name are kept; the returned ref
// has SHA256 and Size.
type ArtifactPutter interface {
	PutArtifact(ctx context.Context, meta conversation.ArtifactRef, r io.Reader) (conversation.ArtifactRef, error)
}

// ImageAccepter is implemented by architectures whose agent takes images
// in a user message. A message with images for a session of an
// architecture that is not one (or says false) is refused before its turn
// starts (UNSUPPORTED_CONTENT).
type ImageAccepter interface {
	AcceptsImages() bool
}

// TurnResult is what a finished turn reports.
type TurnResult struct {
	// Result is the agent's final answer when its protocol has one.
	Result string
}

// Host is what a session offers its runner. Methods are safe for
// concurrent use.
type Host interface {
	SessionID() string
	Env() sandbox.Environment
	Profile() profile.Profile
	// Options are the session's options (model, …) as they are now: a
	// client may change them (PATCH …/options) while the runner runs, so
	// a runner reads them when it starts its agent.
	Options() Options
	// Emit appends events to the session's log (durably, with seqs assigned)
	// and returns when they are stored. Unset context fields are filled in.
	Emit(ctx context.Context, events ...conversation.Event) error
	// RequestPermission asks for permission to run a tool: the profile's
	// allowed and disallowed tools answer at once; otherwise a
	// permission:requested event is emitted and RequestPermission waits for
	// a client's answer, the timeout (deny) or ctx.
	RequestPermission(ctx context.Context, req PermissionRequest) (PermissionDecision, error)
	// AgentState returns the state the runner saved last (nil if none);
	// SaveAgentState stores new state in the session record (e.g. the CLI's
	// session id, so a later runner can resume).
	AgentState() json.RawMessage
	SaveAgentState(ctx context.Context, state json.RawMessage) error
	// SaveTranscript stores the agent's own transcript file (e.g. a Claude
	// Code session .jsonl) with the session, so the agent's conversation can
	// be restored into a new environment; LoadTranscript reads it back
	// (store.ErrNotFound when absent).
	SaveTranscript(ctx context.Context, name string, data []byte) error
	LoadTranscript(ctx context.Context, name string) ([]byte, error)
	// SetAgentInfo records the agent's version and its own session id on the
	// session's runtime.
	SetAgentInfo(ctx context.Context, version, agentSessionID string) error
	Logger() *slog.Logger
}

// Options are the sessionOptions of POST /api/sessions that agentd reads;
// Extra keeps the rest for architectures that want them.
type Options struct {
	Model string          `json:"model,omitempty"`
	Extra json.RawMessage `json:"-"`
}

// OptionsChecker is implemented by architectures that read sessionOptions
// keys besides model: CheckOption says whether key is one of them (known)
// and, if so, whether value is valid for it. A session's options may be
// changed only to keys its architecture knows.
type OptionsChecker interface {
	CheckOption(key string, value json.RawMessage) (known bool, err error)
}

// OptionsUpdater is implemented by runners whose running agent can take
// new options (Host.Options has them) without a restart: UpdateOptions
// passes on what it can; the rest waits for the agent's next start. It may
// be called while a turn runs.
type OptionsUpdater interface {
	UpdateOptions(ctx context.Context) error
}

// Syncer is implemented by runners whose agent keeps state of its own in
// the environment (its transcript): Sync saves it with the session now
// (Host.SaveTranscript), as the runner does after each turn. It may be
// called while a turn runs.
type Syncer interface {
	Sync(ctx context.Context) error
}

// PermissionRequest asks to run a tool.
type PermissionRequest struct {
	ToolName  string
	Input     json.RawMessage
	ToolUseID string
	// Timeout overrides the server's default when > 0.
	Timeout time.Duration
}

// PermissionDecision answers a PermissionRequest.
type PermissionDecision struct {
	Behavior     conversation.PermissionBehavior
	Message      string
	UpdatedInput json.RawMessage
	By           conversation.ResolvedBy
	// Scope "session" on an allow (ByUser) also allows every later request
	// for the same tool in the session (ByRule).
	Scope conversation.PermissionScope
	// Actor is the principal who answered (ByUser).
	Actor string
}

// Resumer is implemented by runners that can take over a turn that was
// running when the server stopped, when the environment survived the
// restart (a sandbox.Recoverer backend). Resume continues the turn from
// what the log already holds (st is the session's reduced conversation) so
// that nothing is emitted twice and nothing is lost, and returns like Turn.
type Resumer interface {
	Resume(ctx context.Context, t Turn, st conversation.State) (TurnResult, error)
}

// ErrDetached is returned by Runner.Turn after Detach: the turn goes on in
// the environment and a later server resumes it (Resumer).
var ErrDetached = errors.New("agent: turn detached")

// Detacher is implemented by runners whose turns can outlive the server
// (with a sandbox whose environments survive it): Detach makes a running
// Turn return ErrDetached at once without stopping the agent. The session
// calls it from its owner goroutine while a Turn runs in its job
// goroutine.
type Detacher interface {
	Detach()
}
