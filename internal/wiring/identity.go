package wiring

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store"
)

// startIdentity builds the auth service: users, tokens and OIDC when the
// store keeps them (store.IdentityStore), else the single-user server of
// the bootstrap key (or no auth).
func (s *Server) startIdentity(ctx context.Context) error {
	cfg := s.cfg
	ident, _ := s.store.(store.IdentityStore)
	if ident == nil && (cfg.OIDC != nil || cfg.RequireAuth || len(cfg.ServerKey) > 0) {
		return errors.New("OIDC, --require-auth and per-user provider keys need a store that keeps users (store.IdentityStore); this store does not")
	}
	var keyring *auth.Keyring
	if len(cfg.ServerKey) > 0 {
		k, err := auth.NewKeyring(cfg.ServerKey)
		if err != nil {
			return err
		}
		keyring = k
	}
	var oidc *auth.OIDC
	if o := cfg.OIDC; o != nil {
		oc := *o
		oc.DefaultTenant, oc.Logger = cfg.DefaultTenant, s.log
		var err error
		if oidc, err = auth.NewOIDC(ctx, oc); err != nil {
			return err
		}
	}
	svc, err := auth.New(auth.Config{
		Identity: ident, Sessions: s.store, BootstrapKey: cfg.APIKey, DefaultTenant: cfg.DefaultTenant,
		Required: cfg.RequireAuth, OIDC: oidc, Keyring: keyring, Prices: cfg.ModelPrices, Logger: s.log,
		Limits: cfg.Limits,
	})
	if err != nil {
		return err
	}
	s.auth = svc // closed by closeIdentity from here on, whatever fails next
	if err := svc.Start(ctx); err != nil {
		return err
	}
	svc.Register(cfg.Registerer)
	s.log.Info("auth", "required", svc.Required(), "multiUser", svc.MultiUser(), "oidc", oidc != nil, "providerKeys", keyring != nil,
		"ratePerToken", cfg.Limits.RequestsPerSecond)
	return nil
}

// owners is the model proxy's view of sessions' owners: the session
// manager knows the owner, the auth service the keys and budgets.
type owners struct{ s *Server }

func (o owners) Owner(sessionID string) (string, string) {
	if m := o.s.manager.Load(); m != nil {
		owner, tenant, _ := m.Owner(sessionID)
		return owner, tenant
	}
	return "", ""
}

func (o owners) ResolveKey(ctx context.Context, owner, tenant, provider string) (string, error) {
	return o.s.auth.ResolveKey(ctx, owner, tenant, provider)
}

func (o owners) CheckBudget(ctx context.Context, owner, tenant string) error {
	return o.s.auth.CheckBudget(ctx, owner, tenant)
}

func (o owners) Charge(ctx context.Context, owner, tenant, model string, u conversation.Usage) error {
	return o.s.auth.Charge(ctx, owner, tenant, model, u)
}

// ownerBudgetExceeded fails the session's running turn with
// BUDGET_EXCEEDED when its owner's or tenant's budget refused a request.
func (s *Server) ownerBudgetExceeded(ctx context.Context, sessionID string, cause error) {
	m := s.manager.Load()
	if m == nil {
		return
	}
	err := m.FailTurn(ctx, sessionID, agent.Fail(agent.CodeBudgetExceeded, "%s", cause.Error()))
	if err != nil && !errors.Is(err, session.ErrNotFound) {
		s.log.Warn("report an exceeded budget", "session", sessionID, "err", err)
	}
	var be *auth.BudgetError
	if errors.As(cause, &be) {
		s.auth.Record(store.AccessRecord{Kind: store.AccessBudget, Actor: be.Owner, Subject: sessionID, Detail: be.Error()})
	}
}

func (s *Server) closeIdentity(ctx context.Context) error {
	if s.auth == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.auth.Close(cctx); err != nil {
		return fmt.Errorf("close auth: %w", err)
	}
	return nil
}
