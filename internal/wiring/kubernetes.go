package wiring

import (
	"context"
	"fmt"
	"time"

	"github.com/agentd/agentd/internal/sandbox/kubernetes"
	"github.com/agentd/agentd/internal/sandbox/storefiles"
	"github.com/agentd/agentd/sandbox"
)

// kubernetesSandbox builds the kubernetes backend from the options the
// root package parsed (agentd.KubernetesConfig) and this server's parts.
func (s *Server) kubernetesSandbox(dataDir string) (sandbox.Provider, error) {
	opts := s.cfg.Kubernetes
	co, err := s.containerOptions(dataDir, opts.Image)
	if err != nil {
		return nil, err
	}
	opts.Options = co
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return kubernetes.New(ctx, opts)
}

// filesView is what serves a session's files while its environment is
// down: its workspace folder here, or the store's copies for a backend
// whose workspaces are not folders of this host (kubernetes).
func (s *Server) filesView(provider, local sandbox.Provider) sandbox.Provider {
	if r, ok := provider.(sandbox.RemoteWorkspacer); ok && r.RemoteWorkspaces() {
		return storefiles.New(s.store)
	}
	return local
}

// collectWorkspaces has a backend that keeps workspaces outside this host
// (volume claims) delete those of sessions that no longer exist.
func (s *Server) collectWorkspaces(ctx context.Context) error {
	wc, ok := s.sandbox.(sandbox.WorkspaceCollector)
	if !ok {
		return nil
	}
	recs, err := s.store.ListSessions(ctx)
	if err != nil {
		return fmt.Errorf("collect workspaces: %w", err)
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	return wc.CollectWorkspaces(ctx, ids)
}
