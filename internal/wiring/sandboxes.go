package wiring

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/sandbox/container"
	"github.com/agentd/agentd/internal/sandbox/docker"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/sandbox"
)

// dockerSandbox builds the docker backend (docs/sandboxes.md).
func (s *Server) dockerSandbox(dataDir string) (sandbox.Provider, error) {
	co, err := s.containerOptions(dataDir, s.cfg.DockerImage)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return docker.New(ctx, docker.Options{
		Options: co, User: s.cfg.DockerUser, Executor: s.cfg.DockerExecutor,
		WarmDir: filepath.Join(dataDir, "docker-warm"),
	})
}

// containerOptions are what a container backend (docker, kubernetes)
// takes from the server's configuration, image the backend's.
func (s *Server) containerOptions(dataDir, image string) (container.Options, error) {
	node, err := nodeID(dataDir)
	if err != nil {
		return container.Options{}, err
	}
	return container.Options{
		Image: image, Node: node, Limits: s.cfg.SandboxLimits, Ignore: append(slices.Clone(s.cfg.WatchIgnore), ".agentd"),
		WarmPool: s.cfg.WarmPool, ModelProxy: s.executorModelProxy(), Nice: s.cfg.AgentNice,
		OnCall: s.audit.ExecutorCall, Logger: s.log,
	}, nil
}

// collectSandbox has a backend whose environments live outside the
// server (containers) remove those no active session records — sessions
// deleted or ended while the server was down — once the sessions are
// loaded and before requests are served.
func (s *Server) collectSandbox(ctx context.Context) error {
	c, ok := s.sandbox.(sandbox.Collector)
	if !ok {
		return nil
	}
	recs, err := s.store.ListSessions(ctx)
	if err != nil {
		return fmt.Errorf("collect sandboxes: %w", err)
	}
	var keep []json.RawMessage
	for _, rec := range recs {
		if rec.Status.Active() && len(rec.SandboxState) > 0 {
			keep = append(keep, rec.SandboxState)
		}
	}
	if err := c.Collect(ctx, keep); err != nil {
		return fmt.Errorf("collect sandboxes: %w", err)
	}
	return nil
}

// closeSandbox releases what the backend holds of its own (warm pools).
func (s *Server) closeSandbox(ctx context.Context) error {
	if c, ok := s.sandbox.(sandbox.Closer); ok {
		return c.Close(ctx)
	}
	return nil
}

// sandboxLister answers GET /api/sandboxes.
type sandboxLister struct{ s *Server }

func (l sandboxLister) Sandboxes(ctx context.Context) restapi.SandboxList {
	s := l.s
	out := restapi.SandboxList{Sandboxes: []restapi.SandboxInfo{}}
	names := make([]string, 0, len(s.sandboxes))
	for name := range s.sandboxes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := s.sandboxes[name]
		var info sandbox.Info
		if d, ok := p.(sandbox.Describer); ok {
			info = d.Describe()
		} else {
			info = s.describeBuiltin(name, p)
		}
		si := restapi.SandboxInfo{
			Name: name, Default: p == s.sandbox, SurvivesRestart: info.SurvivesRestart,
			Limits: restapi.SandboxLimits{
				MemoryBytes: info.Limits.MemoryBytes, Pids: info.Limits.Pids, CPUPercent: info.Limits.CPUPercent,
				Enforcement: info.LimitsEnforcement,
			},
			Protections: []restapi.SandboxProtects{}, Pools: []restapi.WarmPool{},
		}
		for _, pr := range info.Protections {
			si.Protections = append(si.Protections, restapi.SandboxProtects{Threat: string(pr.Threat), Protected: pr.Protected, Detail: pr.Detail})
		}
		for _, pl := range info.Pools {
			profiles := pl.Profiles
			if profiles == nil {
				profiles = []string{}
			}
			si.Pools = append(si.Pools, restapi.WarmPool{
				Key: pl.Key, Image: pl.Image, Profiles: profiles, Size: pl.Size, Ready: pl.Ready, Starting: pl.Starting,
				Claims: pl.Claims, Misses: pl.Misses, Failures: pl.Failures, LastError: pl.LastError, LastStartMS: pl.LastStartMS,
			})
		}
		out.Sandboxes = append(out.Sandboxes, si)
	}
	return out
}

// describeBuiltin is docs/security.md's column for the local, executor
// and bwrap backends as configured; other backends without a Describe
// report unknowns.
func (s *Server) describeBuiltin(name string, p sandbox.Provider) sandbox.Info {
	cfg := s.cfg
	users := cfg.RunAsUser != "" || len(cfg.RunAsUserPool) > 0
	pool := len(cfg.RunAsUserPool) > 0
	proxy := s.proxy != nil
	how := "none"
	if le, ok := p.(interface{ LimitsEnforcement() string }); ok {
		how = le.LimitsEnforcement()
	}
	limited := !strings.HasPrefix(how, "none")
	pr := func(t sandbox.Threat, ok bool, detail string) sandbox.Protection {
		return sandbox.Protection{Threat: t, Protected: ok, Detail: detail}
	}
	rootServer := os.Geteuid() == 0
	closed := pr(sandbox.ThreatHostUsers, true, "the data folder and every workspace are closed to other users (0700)")
	bounded := pr(sandbox.ThreatServerReads, true, "the server reads regular files only, non-blocking, up to a size bound")
	localRoot := pr(sandbox.ThreatHostRoot, true, "agents run as the server's user, not root")
	if rootServer {
		localRoot = pr(sandbox.ThreatHostRoot, false, "the server runs as root: so do its agents")
	}
	key := pr(sandbox.ThreatProviderKey, proxy, "the model proxy holds the keys; agents get a per-session token")
	if !proxy {
		key.Detail = "no model proxy: provider keys, if the server has any, are passed in"
	}
	pick := func(ok bool, yes, no string) sandbox.Protection {
		if ok {
			return sandbox.Protection{Protected: true, Detail: yes}
		}
		return sandbox.Protection{Detail: no}
	}
	switch name {
	case "local":
		return sandbox.Info{Protections: []sandbox.Protection{
			pr(sandbox.ThreatOtherWorkspaces, false, "agents run as the server's user"),
			pr(sandbox.ThreatHostFiles, false, "agents run as the server's user"),
			pr(sandbox.ThreatServerEnvironment, false, "same user"),
			pr(sandbox.ThreatWriteOutside, false, "same user"),
			pr(sandbox.ThreatServerPort, false, "same network"),
			pr(sandbox.ThreatNetwork, false, "same network"),
			key,
			pr(sandbox.ThreatExhaustion, false, "no limits"),
			pr(sandbox.ThreatLeftovers, false, "a process that leaves its process group survives"),
			pr(sandbox.ThreatSignal, false, "same user"),
			closed,
			localRoot,
			bounded,
		}, LimitsEnforcement: "none"}
	case "executor", "bwrap":
		bw := name == "bwrap"
		rows := []struct {
			t sandbox.Threat
			p sandbox.Protection
		}{
			{sandbox.ThreatOtherWorkspaces, pick(bw || pool, "not mounted, or another uid's (0700)", "sessions share a user")},
			{sandbox.ThreatHostFiles, pick(bw || users, "not mounted, or the data folder is closed to other users", "the server's user")},
			{sandbox.ThreatServerEnvironment, pick(bw || users, "own pid namespace, or another uid", "the server's user")},
			{sandbox.ThreatWriteOutside, pick(bw, "system read-only, private /tmp", "wherever its user may")},
			{sandbox.ThreatServerPort, pick(bw, "own network namespace", "same network: only --api-key guards /api")},
			{sandbox.ThreatNetwork, pick(bw, "only the model proxy relay", "same network")},
			{sandbox.ThreatProviderKey, key},
			{sandbox.ThreatExhaustion, pick(limited, how, "no limits enforced: "+how)},
			{sandbox.ThreatLeftovers, pick(limited || bw, "the environment's cgroup (or pid namespace) is emptied at Terminate", "a process that leaves its process group survives")},
			{sandbox.ThreatSignal, pick(bw || pool, "own pid namespace, or another uid", "same user as other sessions")},
			{sandbox.ThreatHostUsers, closed},
			{sandbox.ThreatHostRoot, pick(!rootServer || users || bw, "agents' files belong to an unprivileged host uid", "the server runs as root: so do its agents")},
			{sandbox.ThreatServerReads, bounded},
		}
		info := sandbox.Info{Limits: cfg.SandboxLimits, LimitsEnforcement: how, SurvivesRestart: true}
		for _, r := range rows {
			r.p.Threat = r.t
			info.Protections = append(info.Protections, r.p)
		}
		return info
	}
	info := sandbox.Info{LimitsEnforcement: "unknown"}
	for _, t := range sandbox.Threats {
		info.Protections = append(info.Protections, pr(t, false, "not described by this backend"))
	}
	return info
}
