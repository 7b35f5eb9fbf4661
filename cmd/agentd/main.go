// Command agentd runs AI coding agents in sandboxes and serves them over
// HTTP, WebSocket, SSE and Socket.IO. This file only wires flags to the
// packages that do the work.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/convert"
	"github.com/agentd/agentd/internal/executor"
	"github.com/agentd/agentd/internal/mockllm"
	"github.com/agentd/agentd/internal/runcli"
	"github.com/agentd/agentd/internal/sandbox"
	"github.com/agentd/agentd/internal/sandbox/local"
)

type cli struct {
	LogLevel  string `help:"Log level: debug, info, warn, error." default:"info" env:"AGENTD_LOG_LEVEL" enum:"debug,info,warn,error"`
	LogFormat string `help:"Log format: text or json." default:"text" env:"AGENTD_LOG_FORMAT" enum:"text,json"`

	Serve    serveCmd    `cmd:"" help:"Run the HTTP API, WebSocket, SSE, Socket.IO and web UI."`
	Executor executorCmd `cmd:"" help:"Run the isolated executor process (JSON-RPC 2.0 over a Unix socket)."`
	MockLLM  mockLLMCmd  `cmd:"" name:"mock-llm" help:"Run a scripted model server (Anthropic, OpenAI and Gemini APIs)."`
	Convert  convertCmd  `cmd:"" help:"Convert agent output files to agentd events or blocks (JSON lines)."`
	Run      runCmd      `cmd:"" help:"One-shot: create a session, stream the turn to the terminal, exit with its status."`
	Version  versionCmd  `cmd:"" help:"Print version, commit and supported agent CLI versions."`
}

type serveCmd struct {
	Addr               string        `help:"Listen address." default:"127.0.0.1:8080" env:"AGENTD_ADDR"`
	DataDir            string        `help:"Data folder: database, workspaces, run files." default:"./data" env:"AGENTD_DATA_DIR" type:"path"`
	Store              string        `help:"Store URL: sqlite://PATH (default sqlite://<data-dir>/agentd.db), or postgres://… for servers sharing one PostgreSQL database." env:"AGENTD_STORE"`
	Profiles           string        `help:"Folder of agent profiles (YAML or JSON, one a file)." env:"AGENTD_PROFILES" type:"path"`
	Sandbox            string        `help:"Sandbox backend: local, executor, bwrap, docker." default:"local" env:"AGENTD_SANDBOX"`
	RunAsUser          string        `help:"With --sandbox executor or bwrap: run agents as this Unix user, shared by all sessions (needs root)." env:"AGENTD_RUN_AS_USER"`
	RunAsUserPool      []string      `help:"With --sandbox executor or bwrap: a Unix user per session, from these names, uids and uid ranges (200000-200099); replaces --run-as-user (needs root)." env:"AGENTD_RUN_AS_USER_POOL"`
	SandboxMemory      int64         `help:"Memory limit of each executor/bwrap/docker environment in bytes (0: none)." default:"4294967296" env:"AGENTD_SANDBOX_MEMORY"`
	SandboxPids        int64         `help:"Process (and thread) limit of each executor/bwrap/docker environment (0: none)." default:"4096" env:"AGENTD_SANDBOX_PIDS"`
	SandboxCPU         int           `help:"CPU limit of each executor/bwrap/docker environment in percent of one core (0: none)." default:"0" env:"AGENTD_SANDBOX_CPU"`
	SandboxLimits      string        `help:"How limits are enforced: auto (cgroups where possible, else rlimits), cgroup, rlimit, off." default:"auto" enum:"auto,cgroup,rlimit,off" env:"AGENTD_SANDBOX_LIMITS"`
	SandboxReadOnly    []string      `help:"With --sandbox bwrap: more host paths shown read-only inside." env:"AGENTD_SANDBOX_READ_ONLY"`
	SandboxUID         uint32        `help:"With --sandbox bwrap, a root server and neither --run-as-user nor --run-as-user-pool: the host uid sandboxes run as (their root is mapped to it; 0: 2000000000)." default:"0" env:"AGENTD_SANDBOX_UID"`
	DockerImage        string        `help:"With --sandbox docker: the image (built by scripts/sandbox-image.sh; never pulled)." default:"agentd-sandbox:latest" env:"AGENTD_DOCKER_IMAGE"`
	DockerUser         string        `help:"With --sandbox docker: uid:gid the sandbox's processes run as." default:"10001:10001" env:"AGENTD_DOCKER_USER"`
	DockerExecutor     string        `help:"With --sandbox docker: mount this agentd binary into every container as its executor instead of the image's." env:"AGENTD_DOCKER_EXECUTOR" type:"path"`
	WarmPool           int           `help:"With --sandbox docker: environments of each kind (image and limits) kept started ahead for new sessions." default:"0" env:"AGENTD_WARM_POOL"`
	AgentNice          int           `help:"Niceness added to agent processes (0-19), so they yield the CPU to the server streaming their output; 0 runs them at the server's priority." default:"10" env:"AGENTD_AGENT_NICE"`
	APIKey             string        `help:"Require this bearer key on /api/* and the WebSocket." env:"AGENTD_API_KEY"`
	IdleTimeout        time.Duration `help:"Terminate an idle environment after this long." default:"15m" env:"AGENTD_IDLE_TIMEOUT"`
	PermissionTimeout  time.Duration `help:"Deny an unanswered permission request after this long." default:"5m" env:"AGENTD_PERMISSION_TIMEOUT"`
	MaxBody            int64         `help:"Largest request body in bytes." default:"1048576" env:"AGENTD_MAX_BODY"`
	NoUI               bool          `help:"Do not serve the web UI." env:"AGENTD_NO_UI"`
	ModelProxy         bool          `help:"Keep provider API keys out of sandboxes: agents get a per-session token and the model proxy's address (on whenever a key is set; --no-model-proxy passes the keys in)." default:"true" negatable:"" env:"AGENTD_MODEL_PROXY"`
	ModelProxyAddr     string        `help:"Loopback address of the model proxy (default: a port kept in the data folder across restarts)." env:"AGENTD_MODEL_PROXY_ADDR"`
	SessionTokenBudget int64         `help:"Most model tokens (input, output, cache) a session may use, counted by the model proxy; 0 for no limit." default:"0" env:"AGENTD_SESSION_TOKEN_BUDGET"`

	NATS          string        `name:"nats" help:"NATS server URL (nats://host:4222): join a fleet of servers sharing one PostgreSQL --store, any of which serves any session (docs/fleet.md)." env:"AGENTD_NATS"`
	NATSPrefix    string        `name:"nats-prefix" help:"With --nats: the prefix of the fleet's NATS subjects; fleets sharing a NATS server need one each." default:"agentd" env:"AGENTD_NATS_PREFIX"`
	NATSPayload   string        `name:"nats-payload" help:"With --nats: what a commit publishes to the other servers: events, or notice (its seq range; they read the store)." default:"events" enum:"events,notice" env:"AGENTD_NATS_PAYLOAD"`
	NodeID        string        `name:"node-id" help:"This server's name in session leases (default: an id kept in <data-dir>/node-id); each server of a fleet needs its own." env:"AGENTD_NODE_ID"`
	LeaseTTL      time.Duration `name:"lease-ttl" help:"How long a session's lease lasts unless renewed (every third of it): the longest a session whose server died waits for another server to take it over." default:"15s" env:"AGENTD_LEASE_TTL"`
	WorkspacesDir string        `name:"workspaces" help:"Folder of the sessions' workspaces (default <data-dir>/workspaces); servers of a fleet on one machine may share one." env:"AGENTD_WORKSPACES" type:"path"`
}

func (c *serveCmd) Run(ctx context.Context, log *slog.Logger) error {
	if c.AgentNice < 0 || c.AgentNice > local.MaxNice {
		return fmt.Errorf("--agent-nice %d: want 0 to %d", c.AgentNice, local.MaxNice)
	}
	srv, err := agentd.New(ctx, agentd.Config{
		Addr: c.Addr, DataDir: c.DataDir, StoreURL: c.Store, ProfilesDir: c.Profiles,
		Sandbox: c.Sandbox, RunAsUser: c.RunAsUser, APIKey: c.APIKey, IdleTimeout: c.IdleTimeout,
		AgentNice:     agentNice(c.AgentNice),
		RunAsUserPool: c.RunAsUserPool, SandboxLimitMode: c.SandboxLimits, SandboxReadOnly: c.SandboxReadOnly, SandboxUID: c.SandboxUID,
		SandboxLimits:     sandbox.Limits{MemoryBytes: c.SandboxMemory, Pids: c.SandboxPids, CPUPercent: c.SandboxCPU},
		PermissionTimeout: c.PermissionTimeout, MaxBody: c.MaxBody, DisableUI: c.NoUI, Logger: log,
		DisableModelProxy: !c.ModelProxy, ModelProxyAddr: c.ModelProxyAddr, SessionTokenBudget: c.SessionTokenBudget,
		DockerImage: c.DockerImage, DockerUser: c.DockerUser, DockerExecutor: c.DockerExecutor, WarmPool: c.WarmPool,
		NATSURL: c.NATS, NATSPrefix: c.NATSPrefix, NATSEventNotices: c.NATSPayload == "notice",
		NodeID: c.NodeID, LeaseTTL: c.LeaseTTL, WorkspacesDir: c.WorkspacesDir,
	})
	if err != nil {
		return err
	}
	if err := srv.Listen(); err != nil {
		_ = srv.Close(context.Background())
		return err
	}
	// Tests and scripts read the bound address (useful with port 0).
	fmt.Fprintf(os.Stderr, "agentd listening on http://%s\n", srv.Addr())
	return srv.ListenAndServe(ctx)
}

// agentNice maps --agent-nice onto agentd.Config.AgentNice, where 0 means
// the default and a negative value none.
func agentNice(flag int) int {
	if flag == 0 {
		return -1
	}
	return flag
}

type executorCmd struct {
	Args []string `arg:"" optional:"" passthrough:"" help:"Executor flags (--socket PATH --workspace DIR …; see agentd executor --help)."`
}

func (c *executorCmd) Run(ctx context.Context) error { return executor.Main(ctx, c.Args) }

type mockLLMCmd struct {
	Addr       string `help:"Listen address." default:"127.0.0.1:8089" env:"AGENTD_MOCK_LLM_ADDR"`
	Script     string `help:"Script file (YAML or JSON); see docs/mock-llm.md." required:"" type:"existingfile"`
	RequestLog string `help:"Append every request as a JSON line to this file." type:"path"`
}

func (c *mockLLMCmd) Run(ctx context.Context, log *slog.Logger) error {
	script, err := mockllm.Load(c.Script)
	if err != nil {
		return err
	}
	opts := []mockllm.Option{mockllm.WithLogger(log)}
	if c.RequestLog != "" {
		f, err := os.OpenFile(c.RequestLog, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("open request log: %w", err)
		}
		defer f.Close()
		opts = append(opts, mockllm.WithRequestLog(f))
	}
	fmt.Fprintf(os.Stderr, "mock-llm listening on http://%s\n", c.Addr)
	return mockllm.New(script, opts...).Serve(ctx, c.Addr)
}

type convertCmd struct {
	Format string   `help:"Input format." required:"" short:"f"`
	Blocks bool     `help:"Print the reduced blocks instead of the events."`
	Files  []string `arg:"" type:"existingfile" help:"Input files."`
}

func (c *convertCmd) Run() error {
	warnings, err := convert.Run(convert.Options{Format: c.Format, Files: c.Files, Blocks: c.Blocks}, os.Stdout)
	for _, w := range warnings {
		fmt.Fprintf(os.Stderr, "skipped %s\n", w)
	}
	return err
}

type runCmd struct {
	Server       string `help:"Server URL." default:"http://127.0.0.1:8080" env:"AGENTD_SERVER"`
	APIKey       string `help:"API key." env:"AGENTD_API_KEY"`
	Architecture string `help:"Architecture (shell, claude-code, codex, gemini-cli, opencode)." required:"" short:"a"`
	Profile      string `help:"Agent profile id." short:"p"`
	Model        string `help:"Model (sessionOptions.model)." short:"m"`
	Yes          bool   `help:"Allow every permission request without asking." short:"y"`
	Keep         bool   `help:"Keep the session's environment after the turn (default: terminate it)."`
	Prompt       string `arg:"" help:"The message to send."`
}

func (c *runCmd) Run(ctx context.Context) error {
	return runcli.Run(ctx, runcli.Options{
		Server: c.Server, APIKey: c.APIKey, Architecture: c.Architecture, Profile: c.Profile,
		Model: c.Model, Prompt: c.Prompt, AutoAllow: c.Yes, Keep: c.Keep,
		In: os.Stdin, Out: os.Stdout, Err: os.Stderr,
	})
}

type versionCmd struct{}

func (versionCmd) Run() error {
	commit := agentd.Commit
	if commit == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					commit = s.Value
				}
			}
		}
	}
	fmt.Printf("agentd %s\n", agentd.Version)
	if commit != "" {
		fmt.Printf("commit %s\n", commit)
	}
	fmt.Println("supported agent CLIs (tested versions):")
	for _, v := range agentd.SupportedAgents {
		fmt.Printf("  %-12s %-28s %s\n", v.Architecture, v.Package+"@"+v.Version, v.Command)
	}
	return nil
}

func main() {
	var c cli
	kctx := kong.Parse(&c,
		kong.Name("agentd"),
		kong.Description("Run AI coding agents in isolated sandboxes and serve them over HTTP, WebSocket, SSE and Socket.IO."),
		kong.UsageOnError(),
	)
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel))
	var h slog.Handler = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})
	if c.LogFormat == "json" {
		h = slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})
	}
	log := slog.New(h)
	slog.SetDefault(log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	kctx.BindTo(ctx, (*context.Context)(nil))
	kctx.Bind(log)
	if err := kctx.Run(); err != nil {
		var exit runcli.ExitError
		if errors.As(err, &exit) {
			if msg := strings.TrimSpace(exit.Error()); msg != "" {
				fmt.Fprintln(os.Stderr, "agentd:", msg)
			}
			os.Exit(exit.Code)
		}
		fmt.Fprintln(os.Stderr, "agentd:", err)
		os.Exit(1)
	}
}
