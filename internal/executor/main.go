// Package executor is the agentd executor program (`agentd executor`): a
// process that runs one session's commands and file operations on behalf
// of the API server and outlives it. The server starts one executor per
// session, detached, and talks to it over the protocol of package rpc
// (internal/executor/rpc), which this package serves (see
// docs/executor.md).
//
// It holds the command (Main, PodInit), the server side of the protocol
// (Serve, Executor and its per-connection handler), the output spool, the
// peer checks, the relay to the model proxy (Forwarder) and the tunnels
// that carry it out of a Kubernetes pod (TunnelPool).
package executor

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/sandbox"
)

// Main runs `agentd executor` with its flags (args excludes the
// subcommand name), or `agentd executor pod-init` (PodInit). It returns
// when the executor stops: after a shutdown request, the orphan timeout,
// SIGTERM/SIGINT or ctx.
func Main(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "pod-init" {
		return PodInit(args[1:])
	}
	fl := flag.NewFlagSet("executor", flag.ContinueOnError)
	var (
		socket     = fl.String("socket", "", "listen on this Unix socket path (mode 0600, 0660 with --group)")
		listenFD   = fl.Int("listen-fd", -1, "serve an inherited listening Unix socket at this fd instead of --socket")
		listenTCP  = fl.String("listen-tcp", "", "listen on this loopback TCP address instead of --socket (inside a Kubernetes pod, reached through the API server's port-forward); the peer's uid is read from the socket table")
		group      = fl.String("group", "", "group (name or gid) owning the socket, which is then mode 0660")
		workspace  = fl.String("workspace", "", "the session's workspace folder (required)")
		session    = fl.String("session", "", "session id, for logs")
		spoolDir   = fl.String("spool-dir", "", "folder for output spools (default: the temp folder)")
		spoolBytes = fl.Int64("spool-bytes", DefaultSpoolBytes, "spool size per process and stream (beyond it: back-pressure while a server receives the output, else the oldest output is dropped)")
		peerUID    = fl.Int("peer-uid", os.Getuid(), "the only uid allowed to connect")
		maxLine    = fl.Int("max-line", rpc.DefaultMaxLine, "largest accepted message in bytes")
		orphan     = fl.Duration("orphan-timeout", 0, "shut down after no server was connected for this long (0: never)")
		path       = fl.String("path", "", "PATH of the processes (default: this process's PATH)")
		nice       = fl.Int("nice", 0, "added to the niceness of every process started (0-19; 0: this process's priority)")
		logLevel   = fl.String("log-level", "info", "debug, info, warn or error")
		ignore     stringList
		memory     = fl.Int64("memory", 0, "memory limit in bytes (0: backend default)")
		pids       = fl.Int64("pids", 0, "process count limit (0: backend default)")
		cpu        = fl.Int("cpu", 0, "CPU limit in percent of one core (0: backend default)")
		uid        = fl.Int("uid", -1, "switch to this uid before serving (the executor must start as root)")
		gid        = fl.Int("gid", -1, "with --uid: the gid to switch to")
		groups     = fl.String("groups", "", "with --uid: supplementary gids, comma-separated")
		holdFD     = fl.Int("hold-fd", -1, "keep this inherited fd open (not passed to processes) while the executor lives, e.g. a lock the server holds through it")
		nproc      = fl.Int64("nproc", 0, "RLIMIT_NPROC of the executor and its processes (per uid; ignored for root; 0: none)")
		reserve    = fl.Int("reserve-threads", 0, "create this many OS threads at start and keep them, so a process limit reached by the agents cannot starve the executor")
		proxySock  = fl.String("model-proxy-socket", "", "relay TCP connections on --model-proxy-listen to this Unix socket (the model proxy)")
		proxyAddr  = fl.String("model-proxy-listen", "127.0.0.1:0", "with --model-proxy-socket or --model-proxy-tunnel: the TCP address agents connect to")
		tunnelAddr = fl.String("model-proxy-tunnel", "", "relay TCP connections on --model-proxy-listen through tunnels the server opens to this loopback TCP address (where nothing inside can reach the server)")
	)
	fl.Var(&ignore, "ignore", "path pattern the watcher does not report (repeatable)")
	if err := fl.Parse(args); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("executor: unexpected arguments %q", fl.Args())
	}
	if *workspace == "" {
		return errors.New("executor: --workspace is required")
	}
	if *nice < 0 || *nice > local.MaxNice {
		return fmt.Errorf("executor: --nice %d: want 0 to %d", *nice, local.MaxNice)
	}
	if n := btoi(*socket != "") + btoi(*listenFD >= 0) + btoi(*listenTCP != ""); n != 1 {
		return errors.New("executor: give exactly one of --socket, --listen-fd and --listen-tcp")
	}
	if *proxySock != "" && *tunnelAddr != "" {
		return errors.New("executor: give at most one of --model-proxy-socket and --model-proxy-tunnel")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("executor: --log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).
		With("component", "executor", "session", *session, "pid", os.Getpid())

	if *holdFD >= 0 {
		// Not for the processes: only this executor's life holds it.
		if _, err := unix.FcntlInt(uintptr(*holdFD), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			return fmt.Errorf("executor: --hold-fd %d: %w", *holdFD, err)
		}
	}
	if *uid >= 0 {
		if *gid < 0 {
			return errors.New("executor: --uid needs --gid")
		}
		gs, err := parseIDs(*groups)
		if err != nil {
			return fmt.Errorf("executor: --groups: %w", err)
		}
		if err := switchUser(*uid, *gid, gs); err != nil {
			return fmt.Errorf("executor: %w", err)
		}
	}
	if *nproc > 0 {
		if err := limitProcs(*nproc); err != nil {
			return fmt.Errorf("executor: %w", err)
		}
	}
	reserveThreads(*reserve)

	cfg := Config{
		SocketPath: *socket, Group: *group, Workspace: *workspace, PeerUID: *peerUID,
		SpoolDir: *spoolDir, SpoolBytes: *spoolBytes, MaxLine: *maxLine,
		OrphanTimeout: *orphan, Logger: log,
	}
	if *listenFD >= 0 {
		f := os.NewFile(uintptr(*listenFD), "listener")
		if f == nil {
			return fmt.Errorf("executor: --listen-fd %d: not an open file", *listenFD)
		}
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("executor: --listen-fd %d: %w", *listenFD, err)
		}
		if _, ok := ln.(*net.UnixListener); !ok {
			ln.Close()
			return fmt.Errorf("executor: --listen-fd %d is not a Unix socket listener", *listenFD)
		}
		// The server created the socket; from now on a client sees this
		// executor, as the user it switched to, as its peer: a restarted
		// server checks that before trusting the socket (Recover).
		if err := relisten(ln); err != nil {
			ln.Close()
			return fmt.Errorf("executor: --listen-fd %d: %w", *listenFD, err)
		}
		cfg.Listener = ln
	}
	if *listenTCP != "" {
		ln, err := listenLoopback(*listenTCP)
		if err != nil {
			return fmt.Errorf("executor: --listen-tcp: %w", err)
		}
		cfg.Listener = ln
	}

	if *tunnelAddr != "" {
		tp, err := NewTunnelPool(*tunnelAddr, *peerUID, log)
		if err != nil {
			if cfg.Listener != nil {
				cfg.Listener.Close()
			}
			return fmt.Errorf("executor: --model-proxy-tunnel: %w", err)
		}
		f, err := NewForwarderTo(*proxyAddr, "tunnel "+*tunnelAddr, tp.Take, 0, log)
		if err != nil {
			tp.Close()
			if cfg.Listener != nil {
				cfg.Listener.Close()
			}
			return fmt.Errorf("executor: --model-proxy-listen: %w", err)
		}
		tunnelsDone := make(chan struct{})
		go func() {
			defer close(tunnelsDone)
			if err := tp.Serve(); err != nil {
				log.Error("tunnels stopped", "err", err)
			}
		}()
		stop := startForwarder(f, log)
		defer func() {
			stop()
			tp.Close()
			<-tunnelsDone
		}()
		cfg.ModelProxyAddr = f.Addr().String()
	}
	if *proxySock != "" {
		f, err := NewForwarder(*proxyAddr, *proxySock, 0, log)
		if err != nil {
			if cfg.Listener != nil {
				cfg.Listener.Close()
			}
			return fmt.Errorf("executor: --model-proxy-listen: %w", err)
		}
		stop := startForwarder(f, log)
		defer stop()
		cfg.ModelProxyAddr = f.Addr().String()
	}

	// The executor outlives its terminal and its server: a hang-up is no
	// reason to kill the agents.
	signal.Ignore(syscall.SIGHUP)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	env, err := local.New(local.Options{Path: *path, Nice: *nice, Logger: log}).Create(ctx, sandbox.Spec{
		SessionID: *session,
		Workspace: *workspace,
		Ignore:    ignore,
		Limits:    sandbox.Limits{MemoryBytes: *memory, Pids: *pids, CPUPercent: *cpu},
	})
	if err != nil {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return fmt.Errorf("executor: %w", err)
	}
	cfg.Env = env
	cfg.Workspace = env.WorkDir() // as processes see it
	e, err := New(cfg)
	if err != nil {
		tctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = env.Terminate(tctx)
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return err
	}
	log.Info("executor serving", "addr", e.Addr().String(), "workspace", env.WorkDir(), "peerUID", *peerUID,
		"uid", os.Getuid(), "threads", threadCount(), "modelProxy", cfg.ModelProxyAddr)
	err = e.Serve(ctx)
	log.Info("executor stopped", "err", err)
	return err
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
