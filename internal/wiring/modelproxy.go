package wiring

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/internal/api"
	"github.com/agentd/agentd/internal/audit"
	"github.com/agentd/agentd/internal/modelproxy"
	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store"
)

// startModelProxy starts the audit recorder and, unless disabled or there
// is no provider key to protect, the model proxy (docs/security.md).
func (s *Server) startModelProxy(dataDir string) error {
	cfg := s.cfg
	auditStore, _ := s.store.(store.AuditStore)
	if auditStore == nil {
		s.log.Warn("the store keeps no audit log (it does not implement store.AuditStore): audit records go to the log only")
	}
	s.audit = audit.New(audit.Options{
		Store: auditStore, Actor: s.turnActor, Registerer: cfg.Registerer, Logger: s.log,
	})
	if cfg.SessionTokenBudget < 0 {
		return fmt.Errorf("session token budget %d: must not be negative", cfg.SessionTokenBudget)
	}
	ups, err := modelproxy.UpstreamsFromEnv(cfg.Env)
	if err != nil {
		return fmt.Errorf("model proxy: %w", err)
	}
	// Users who may bring their own provider keys reach every provider
	// through the proxy, whether or not the server has a key for it.
	userKeys := len(cfg.ServerKey) > 0 && s.auth.MultiUser() && !cfg.DisableModelProxy
	if userKeys {
		if ups, err = modelproxy.UpstreamsWithUserKeys(cfg.Env); err != nil {
			return fmt.Errorf("model proxy: %w", err)
		}
	}
	switch {
	case cfg.DisableModelProxy:
		if cfg.SessionTokenBudget > 0 {
			return errors.New("a session token budget needs the model proxy, which is disabled")
		}
		if len(ups) > 0 {
			s.log.Warn("model proxy disabled: provider API keys are passed into every sandbox")
		}
		return nil
	case len(ups) == 0:
		if cfg.SessionTokenBudget > 0 {
			s.log.Warn("no provider API key configured: the session token budget applies to nothing")
		}
		return nil
	}
	tokens, _ := s.store.(store.ModelTokenStore)
	if tokens == nil {
		s.log.Warn("the store cannot keep model-proxy tokens (store.ModelTokenStore): environments that outlive a restart lose model access")
	}
	var usage modelproxy.UsageSource
	if auditStore != nil {
		usage = auditStore
	}
	secret, err := loadSecret(filepath.Join(dataDir, "model-proxy.secret"))
	if err != nil {
		return err
	}
	var ownersOf modelproxy.Owners
	if s.auth.MultiUser() {
		ownersOf = owners{s}
	}
	p, err := modelproxy.New(modelproxy.Config{
		Upstreams: ups, Tokens: tokens, Usage: usage, Audit: s.audit, Budget: cfg.SessionTokenBudget, Secret: secret,
		OnBudgetExceeded: s.budgetExceeded, Actor: s.turnActor,
		Owners: ownersOf, OnOwnerBudget: s.ownerBudgetExceeded,
		Metrics: modelproxy.NewMetrics(cfg.Registerer), Logger: s.log,
	})
	if err != nil {
		return err
	}
	if cfg.ModelProxyAddr != "" {
		_, err = p.ListenTCP(cfg.ModelProxyAddr)
	} else {
		_, err = p.ListenLoopback(filepath.Join(dataDir, "model-proxy.port"))
	}
	if err != nil {
		_ = p.Close(context.Background())
		return err
	}
	s.proxy = p
	return nil
}

// closeModelProxy stops the proxy (requests in flight get a few seconds)
// and stores the audit records still queued. Safe to call twice.
func (s *Server) closeModelProxy(ctx context.Context) error {
	var errs []error
	if s.proxy != nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := s.proxy.Close(pctx); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	if s.audit != nil {
		if err := s.audit.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// turnActor names who an audit record of the session acts for: the user
// of its running turn, else its owner (a terminal, an idle environment).
func (s *Server) turnActor(sessionID string) string {
	if m := s.manager.Load(); m != nil {
		if a := m.TurnActor(sessionID); a != "" {
			return a
		}
		owner, _, _ := m.Owner(sessionID)
		return owner
	}
	return ""
}

// budgetExceeded fails the session's running turn with BUDGET_EXCEEDED
// (and reports it as an error event) before the proxy answers the refused
// request.
func (s *Server) budgetExceeded(ctx context.Context, sessionID string, used, budget int64) {
	m := s.manager.Load()
	if m == nil {
		return
	}
	err := m.FailTurn(ctx, sessionID, agent.Fail(agent.CodeBudgetExceeded,
		"the session's model token budget is used up (%d of %d tokens); further model requests are refused", used, budget))
	if err != nil && !errors.Is(err, session.ErrNotFound) {
		s.log.Warn("report an exceeded budget", "session", sessionID, "err", err)
	}
}

// credentials is the session manager's Credentials hook (nil without the
// proxy: no typed nil in the interface).
func (s *Server) credentials() session.Credentials {
	if s.proxy == nil {
		return nil
	}
	return s.proxy
}

// executorModelProxy is the executor backend's ModelProxy option (nil
// without the proxy: no typed nil in the interface).
func (s *Server) executorModelProxy() executor.ModelProxy {
	if s.proxy == nil {
		return nil
	}
	return s.proxy
}

func (s *Server) modelUsage() api.ModelUsage {
	if s.proxy == nil {
		return nil
	}
	return s.proxy
}

// loadSecret reads the model proxy's secret (which derives the tokens of
// session sockets, so they survive a restart), making it on first use.
func loadSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil && len(b) >= 32 {
		return b, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("model proxy secret: %w", err)
	}
	b = make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("model proxy secret: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("model proxy secret: %w", err)
	}
	return b, nil
}

func auditReader(st store.Store) api.AuditReader {
	if a, ok := st.(store.AuditStore); ok {
		return a
	}
	return nil
}
