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
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/alecthomas/kong"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/convert"
	"github.com/agentd/agentd/internal/executor"
	"github.com/agentd/agentd/internal/mockllm"
	"github.com/agentd/agentd/internal/runcli"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/sandbox"
)

type cli struct {
	LogLevel  string `help:"Log level: debug, info, warn, error." default:"info" env:"AGENTD_LOG_LEVEL" enum:"debug,info,warn,error"`
	LogFormat string `help:"Log format: text or json." default:"text" env:"AGENTD_LOG_FORMAT" enum:"text,json"`

	Serve   serveCmd   `cmd:"" help:"Run the HTTP API, WebSocket, SSE, Socket.IO and web UI."`
	Run     runCmd     `cmd:"" help:"One-shot: create a session, stream the turn to the terminal, exit with its status."`
	Convert convertCmd `cmd:"" help:"Convert agent output files to agentd events or blocks (JSON lines)."`
	MockLLM mockLLMCmd `cmd:"" name:"mock-llm" help:"Run a scripted model server (Anthropic, OpenAI and Gemini APIs)."`
	Token   tokenCmd   `cmd:"" help:"Create, list and revoke API tokens (over REST, or directly in a store)."`
	Version versionCmd `cmd:"" help:"Print version, commit and supported agent CLI versions."`
	Help    helpCmd    `cmd:"" help:"Show help for agentd or one of its commands (agentd help run)."`
	// Started by the server itself (the executor and bwrap sandboxes), not
	// by people: left out of the help.
	Executor executorCmd `cmd:"" hidden:"" help:"Run the isolated executor process (JSON-RPC 2.0 over a Unix socket)."`
}

// helpCmd is only listed: main turns "agentd help X" into "agentd X --help".
type helpCmd struct {
	Command []string `arg:"" optional:"" help:"The command to explain."`
}

func (helpCmd) Run() error { return nil }

type serveCmd struct {
	Addr               string        `help:"Listen address." default:"127.0.0.1:8080" env:"AGENTD_ADDR"`
	DataDir            string        `help:"Data folder: database, workspaces, run files (default $XDG_DATA_HOME/agentd, i.e. ~/.local/share/agentd). One server at a time may use it." env:"AGENTD_DATA_DIR"`
	Store              string        `help:"Store URL: sqlite://PATH (default sqlite://<data-dir>/agentd.db), or postgres://… for servers sharing one PostgreSQL database." env:"AGENTD_STORE"`
	Profiles           string        `help:"Folder of agent profiles (YAML or JSON, one a file)." env:"AGENTD_PROFILES" type:"path"`
	Sandbox            string        `help:"Sandbox backend: local, executor, bwrap, docker, kubernetes." default:"local" env:"AGENTD_SANDBOX"`
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
	WarmPool           int           `help:"With --sandbox docker or kubernetes: environments of each kind (image and limits) kept started ahead for new sessions." default:"0" env:"AGENTD_WARM_POOL"`
	K8sKubeconfig      string        `name:"k8s-kubeconfig" help:"With --sandbox kubernetes: a kubeconfig file (default: the in-cluster configuration, else $KUBECONFIG or ~/.kube/config)." env:"AGENTD_K8S_KUBECONFIG" type:"path"`
	K8sNamespace       string        `name:"k8s-namespace" help:"With --sandbox kubernetes: the pods' namespace." default:"default" env:"AGENTD_K8S_NAMESPACE"`
	K8sImage           string        `name:"k8s-image" help:"With --sandbox kubernetes: the pods' image (scripts/sandbox-image.sh --oci, imported into the nodes or pushed)." default:"agentd-sandbox:latest" env:"AGENTD_K8S_IMAGE"`
	K8sPullPolicy      string        `name:"k8s-pull-policy" help:"With --sandbox kubernetes: the image's pull policy." default:"Never" enum:"Never,IfNotPresent,Always" env:"AGENTD_K8S_PULL_POLICY"`
	K8sServiceAccount  string        `name:"k8s-service-account" help:"With --sandbox kubernetes: the pods' service account (its token is never mounted)." env:"AGENTD_K8S_SERVICE_ACCOUNT"`
	K8sNodeSelector    []string      `name:"k8s-node-selector" help:"With --sandbox kubernetes: key=value labels the pods' nodes must have." env:"AGENTD_K8S_NODE_SELECTOR"`
	K8sToleration      []string      `name:"k8s-toleration" help:"With --sandbox kubernetes: a toleration of the pods, key[=value]:Effect or key:Exists[:Effect]." env:"AGENTD_K8S_TOLERATIONS"`
	K8sRuntimeClass    string        `name:"k8s-runtime-class" help:"With --sandbox kubernetes: the pods' runtime class (gVisor, Kata…)." env:"AGENTD_K8S_RUNTIME_CLASS"`
	K8sUIDRange        string        `name:"k8s-uid-range" help:"With --sandbox kubernetes: uids the pods run as, one each (FIRST-LAST, or one uid for all)." default:"1000000000-1999999999" env:"AGENTD_K8S_UID_RANGE"`
	K8sAllowNetwork    bool          `name:"k8s-allow-network" help:"With --sandbox kubernetes: keep the pods' network (by default an init container takes it down; only loopback is left)." env:"AGENTD_K8S_ALLOW_NETWORK"`
	K8sWorkspaceSize   string        `name:"k8s-workspace-size" help:"With --sandbox kubernetes: a PersistentVolumeClaim of this size per session as its workspace (default: an emptyDir filled from the store)." env:"AGENTD_K8S_WORKSPACE_SIZE"`
	K8sStorageClass    string        `name:"k8s-storage-class" help:"With --k8s-workspace-size: the claims' storage class (default: the cluster's)." env:"AGENTD_K8S_STORAGE_CLASS"`
	AgentNice          int           `help:"Niceness added to agent processes (0-19), so they yield the CPU to the server streaming their output; 0 runs them at the server's priority." default:"10" env:"AGENTD_AGENT_NICE"`
	APIKey             string        `help:"Require this bearer key on /api/* (but /api/auth), /metrics, the WebSocket and Socket.IO." env:"AGENTD_API_KEY"`
	AllowedHosts       []string      `help:"More host names clients may reach the server by (any port), e.g. a reverse proxy's; other Host headers get 403 (DNS rebinding). localhost, 127.0.0.1 and ::1 always work; with a non-loopback --addr any IP address does too. *.example.com allows subdomains, * any host." env:"AGENTD_ALLOWED_HOSTS"`
	IdleTimeout        time.Duration `help:"Terminate an idle environment after this long." default:"15m" env:"AGENTD_IDLE_TIMEOUT"`
	PermissionTimeout  time.Duration `help:"Deny an unanswered permission request after this long." default:"5m" env:"AGENTD_PERMISSION_TIMEOUT"`
	MaxBody            int64         `help:"Largest request body in bytes." default:"1048576" env:"AGENTD_MAX_BODY"`
	OutputLimit        string        `help:"Most bytes of one block's text (a command's output, a tool's result) kept in a session's log and state: a longer one keeps its first and last halves of it there, and the whole text is an artifact (e.g. 64KiB, 1MiB; off: no limit)." default:"64KiB" env:"AGENTD_OUTPUT_LIMIT"`
	NoUI               bool          `help:"Do not serve the web UI." env:"AGENTD_NO_UI"`
	ModelProxy         bool          `help:"Keep provider API keys out of sandboxes: agents get a per-session token and the model proxy's address (on whenever a key is set; --no-model-proxy passes the keys in)." default:"true" negatable:"" env:"AGENTD_MODEL_PROXY"`
	ModelProxyAddr     string        `help:"Loopback address of the model proxy (default: a port kept in the data folder across restarts)." env:"AGENTD_MODEL_PROXY_ADDR"`
	SessionTokenBudget int64         `help:"Most model tokens (input, output, cache) a session may use, counted by the model proxy; 0 for no limit." default:"0" env:"AGENTD_SESSION_TOKEN_BUDGET"`

	ArtifactQuotaSession int64 `name:"artifact-quota-session" help:"Most bytes of artifacts (large outputs kept whole, images, files) one session may hold; more is refused with ARTIFACT_QUOTA_EXCEEDED. 0 for no limit." default:"1073741824" env:"AGENTD_ARTIFACT_QUOTA_SESSION"`
	MaxUpload            int64 `name:"max-upload" help:"Largest workspace file one PUT /api/sessions/{id}/files/{path} writes, in bytes." default:"33554432" env:"AGENTD_MAX_UPLOAD"`
	MaxImage             int64 `name:"max-image" help:"Largest image (decoded) a message may carry, in bytes." default:"5242880" env:"AGENTD_MAX_IMAGE"`
	MaxMessageBody       int64 `name:"max-message-body" help:"Largest message body (with its base64 images and files), in bytes." default:"25165824" env:"AGENTD_MAX_MESSAGE_BODY"`
	ArtifactQuotaTotal   int64 `name:"artifact-quota-total" help:"Most bytes of distinct artifact content the store may hold (a fleet's servers share it: give each the same); 0 for no limit." default:"0" env:"AGENTD_ARTIFACT_QUOTA_TOTAL"`

	Artifacts string `name:"artifacts" help:"Keep artifact content in an S3-compatible object store instead of the store's database: s3://BUCKET/PREFIX?endpoint=http://HOST:PORT&region=R&path-style=true (credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; a fleet's servers give the same). Empty: in the store." default:"" env:"AGENTD_ARTIFACTS"`

	identityFlags `embed:""`
	NATS          string        `name:"nats" help:"NATS server URL (nats://host:4222): join a fleet of servers sharing one PostgreSQL --store, any of which serves any session (docs/fleet.md)." env:"AGENTD_NATS"`
	NATSPrefix    string        `name:"nats-prefix" help:"With --nats: the prefix of the fleet's NATS subjects; fleets sharing a NATS server need one each." default:"agentd" env:"AGENTD_NATS_PREFIX"`
	NATSPayload   string        `name:"nats-payload" help:"With --nats: what a commit publishes to the other servers: events, or notice (its seq range; they read the store)." default:"events" enum:"events,notice" env:"AGENTD_NATS_PAYLOAD"`
	NodeID        string        `name:"node-id" help:"This server's name in session leases (default: an id kept in <data-dir>/node-id); each server of a fleet needs its own." env:"AGENTD_NODE_ID"`
	LeaseTTL      time.Duration `name:"lease-ttl" help:"How long a session's lease lasts unless renewed (every third of it): the longest a session whose server died waits for another server to take it over." default:"15s" env:"AGENTD_LEASE_TTL"`
	PprofAddr     string        `name:"pprof-addr" help:"Serve Go's profiles (/debug/pprof/) on this address, apart from the API and without its authentication: keep it on loopback. Off by default." env:"AGENTD_PPROF_ADDR"`
	WorkspacesDir string        `name:"workspaces" help:"Folder of the sessions' workspaces (default <data-dir>/workspaces); servers of a fleet on one machine may share one." env:"AGENTD_WORKSPACES" type:"path"`
}

func (c *serveCmd) Run(ctx context.Context, log *slog.Logger) error {
	if c.AgentNice < 0 || c.AgentNice > local.MaxNice {
		return fmt.Errorf("--agent-nice %d: want 0 to %d", c.AgentNice, local.MaxNice)
	}
	outputLimit, err := parseOutputLimit(c.OutputLimit)
	if err != nil {
		return err
	}
	cfg := agentd.Config{
		Addr: c.Addr, DataDir: c.DataDir, StoreURL: c.Store, ProfilesDir: c.Profiles,
		Sandbox: c.Sandbox, RunAsUser: c.RunAsUser, APIKey: c.APIKey, AllowedHosts: c.AllowedHosts, IdleTimeout: c.IdleTimeout,
		AgentNice:     agentNice(c.AgentNice),
		RunAsUserPool: c.RunAsUserPool, SandboxLimitMode: c.SandboxLimits, SandboxReadOnly: c.SandboxReadOnly, SandboxUID: c.SandboxUID,
		SandboxLimits:     sandbox.Limits{MemoryBytes: c.SandboxMemory, Pids: c.SandboxPids, CPUPercent: c.SandboxCPU},
		PermissionTimeout: c.PermissionTimeout, MaxBody: c.MaxBody, DisableUI: c.NoUI, Logger: log, OutputLimit: outputLimit,
		DisableModelProxy: !c.ModelProxy, ModelProxyAddr: c.ModelProxyAddr, SessionTokenBudget: c.SessionTokenBudget,
		ArtifactQuotaSession: c.ArtifactQuotaSession, ArtifactQuotaTotal: c.ArtifactQuotaTotal, ArtifactsURL: c.Artifacts,
		MaxUploadBytes: c.MaxUpload, MaxImageBytes: c.MaxImage, MaxMessageBody: c.MaxMessageBody,
		DockerImage: c.DockerImage, DockerUser: c.DockerUser, DockerExecutor: c.DockerExecutor, WarmPool: c.WarmPool,
		Kubernetes: agentd.KubernetesConfig{
			Kubeconfig: c.K8sKubeconfig, Namespace: c.K8sNamespace, Image: c.K8sImage, PullPolicy: c.K8sPullPolicy,
			ServiceAccount: c.K8sServiceAccount, NodeSelector: c.K8sNodeSelector, Tolerations: c.K8sToleration,
			RuntimeClass: c.K8sRuntimeClass, UIDRange: c.K8sUIDRange, AllowNetwork: c.K8sAllowNetwork,
			WorkspaceSize: c.K8sWorkspaceSize, StorageClass: c.K8sStorageClass,
		},
		NATSURL: c.NATS, NATSPrefix: c.NATSPrefix, NATSEventNotices: c.NATSPayload == "notice",
		NodeID: c.NodeID, LeaseTTL: c.LeaseTTL, WorkspacesDir: c.WorkspacesDir,
	}
	if err := c.identityFlags.apply(&cfg); err != nil {
		return err
	}
	if c.PprofAddr != "" {
		_, stop, err := servePprof(c.PprofAddr, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	srv, err := agentd.New(ctx, cfg)
	if err != nil {
		return err
	}
	if err := srv.Listen(); err != nil {
		_ = srv.Close(context.Background())
		return err
	}
	// Tests and scripts read the bound address (useful with port 0): the
	// URL is the line's fourth word.
	fmt.Fprintf(os.Stderr, "agentd listening on http://%s (data: %s)\n", srv.Addr(), srv.DataDir())
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
	Format string   `help:"Input format (one of those listed above; also agentd convert --list)." short:"f" placeholder:"FORMAT"`
	Blocks bool     `help:"Print the reduced blocks instead of the events."`
	List   bool     `help:"List the input formats and exit."`
	Files  []string `arg:"" optional:"" type:"existingfile" help:"Input files."`
}

// Help lists the formats under the command's usage.
func (convertCmd) Help() string {
	var b strings.Builder
	b.WriteString("Formats:\n\n")
	for _, f := range convert.Formats() {
		fmt.Fprintf(&b, "    %-20s %s\n", f.Name, f.Description)
	}
	b.WriteString("\nA file that yields no events in the chosen format is an error (exit 1): most likely the wrong format.")
	return b.String()
}

func (c *convertCmd) Run() error {
	if c.List {
		for _, f := range convert.Formats() {
			fmt.Printf("%-20s %s\n", f.Name, f.Description)
		}
		return nil
	}
	if c.Format == "" {
		return usageError{"convert", "missing --format (agentd convert --list shows the formats)"}
	}
	if len(c.Files) == 0 {
		return usageError{"convert", "no input files"}
	}
	warnings, err := convert.Run(convert.Options{Format: c.Format, Files: c.Files, Blocks: c.Blocks, RequireEvents: true}, os.Stdout)
	for _, w := range warnings {
		fmt.Fprintf(os.Stderr, "skipped %s\n", w)
	}
	return err
}

// usageError is a command line mistake found after parsing: main prints
// it with the hint to the command's help and exits 2.
type usageError struct{ command, msg string }

func (e usageError) Error() string { return e.msg }

type runCmd struct {
	Server       string `help:"Server URL (default: http://$AGENTD_ADDR, the address agentd serve listens on, else http://127.0.0.1:8080)." env:"AGENTD_SERVER"`
	APIKey       string `help:"API key." env:"AGENTD_API_KEY"`
	Architecture string `help:"Architecture (shell, claude-code, codex, gemini-cli, opencode)." required:"" short:"a"`
	Profile      string `help:"Agent profile id." short:"p"`
	Model        string `help:"Model (sessionOptions.model)." short:"m"`
	Yes          bool   `help:"Allow every permission request without asking." short:"y"`
	Keep         bool   `help:"Keep the session's environment after the turn (default: terminate it)."`
	Prompt       string `arg:"" help:"The message to send."`
}

func (c *runCmd) Run(ctx context.Context) error {
	server := c.Server
	if server == "" {
		server = runcli.ServerURL(os.Getenv("AGENTD_ADDR"))
	}
	return runcli.Run(ctx, runcli.Options{
		Server: server, APIKey: c.APIKey, Architecture: c.Architecture, Profile: c.Profile,
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
	versionFromBuildInfo()
	var c cli
	parser, err := kong.New(&c,
		kong.Name("agentd"),
		kong.Description("Run AI coding agents in isolated sandboxes and serve them over HTTP, WebSocket, SSE and Socket.IO."),
	)
	if err != nil {
		panic(err) // the command line model is fixed: a build error
	}
	kctx, err := parser.Parse(cliArgs(os.Args[1:]))
	if err != nil {
		// One line and a hint, not the whole help.
		fmt.Fprintln(os.Stderr, "agentd:", err)
		fmt.Fprintf(os.Stderr, "Run '%s --help' for usage.\n", helpPath(err))
		os.Exit(2)
	}
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
		var usage usageError
		if errors.As(err, &usage) {
			fmt.Fprintln(os.Stderr, "agentd:", usage.msg)
			fmt.Fprintf(os.Stderr, "Run 'agentd %s --help' for usage.\n", usage.command)
			os.Exit(2)
		}
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

// cliArgs maps "agentd" alone and "agentd help [command…]" onto --help.
func cliArgs(args []string) []string {
	if len(args) == 0 {
		return []string{"--help"}
	}
	if args[0] == "help" {
		return append(append([]string(nil), args[1:]...), "--help")
	}
	return args
}

// helpPath is the command whose help a parse error should point to.
func helpPath(err error) string {
	var pe *kong.ParseError
	if errors.As(err, &pe) && pe.Context != nil {
		if n := pe.Context.Selected(); n != nil {
			return n.FullPath()
		}
	}
	return "agentd"
}

// parseOutputLimit reads --output-limit: bytes, with an optional unit (B,
// KiB, MiB, GiB; K, M, G are the same), or "off" (-1: no limit).
func parseOutputLimit(v string) (int, error) {
	v = strings.TrimSpace(v)
	if strings.EqualFold(v, "off") {
		return -1, nil
	}
	num := strings.TrimRightFunc(v, unicode.IsLetter)
	mult := 1
	switch strings.ToLower(strings.TrimSpace(v[len(num):])) {
	case "", "b":
	case "k", "kb", "kib":
		mult = 1 << 10
	case "m", "mb", "mib":
		mult = 1 << 20
	case "g", "gb", "gib":
		mult = 1 << 30
	default:
		return 0, fmt.Errorf("--output-limit %q: want a size such as 64KiB or 1MiB, or off", v)
	}
	n, err := strconv.Atoi(strings.TrimSpace(num))
	if err != nil || n <= 0 || n > (1<<31)/mult {
		return 0, fmt.Errorf("--output-limit %q: want a size such as 64KiB or 1MiB, or off", v)
	}
	return n * mult, nil
}
