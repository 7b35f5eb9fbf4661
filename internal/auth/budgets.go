package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/store"
)

// Price is a model's price in US dollars per million tokens, which is
// also millionths of a dollar per token.
type Price struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cacheRead,omitempty"`
	CacheWrite float64 `json:"cacheWrite,omitempty"`
}

// Prices maps model name prefixes to prices; the longest matching prefix
// wins. Models without a price cost nothing (only token budgets bind).
type Prices map[string]Price

// LoadPrices reads a JSON object of prefix → Price.
func LoadPrices(path string) (Prices, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("model prices: %w", err)
	}
	var p Prices
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("model prices %s: %w", path, err)
	}
	return p, nil
}

// CostMicros is the cost of usage by model, in millionths of a dollar.
func (p Prices) CostMicros(model string, u conversation.Usage) int64 {
	best, ok := "", false
	for prefix := range p {
		if strings.HasPrefix(model, prefix) && (!ok || len(prefix) > len(best)) {
			best, ok = prefix, true
		}
	}
	if !ok {
		return 0
	}
	pr := p[best]
	c := float64(u.InputTokens)*pr.Input + float64(u.OutputTokens)*pr.Output +
		float64(u.CacheReadInputTokens)*pr.CacheRead + float64(u.CacheCreationInputTokens)*pr.CacheWrite
	return int64(math.Round(c))
}

// Tokens is what a budget counts of usage: every kind of token.
func Tokens(u conversation.Usage) int64 {
	return u.InputTokens + u.OutputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
}

// BudgetError is a model request refused by a user's or tenant's budget.
type BudgetError struct {
	Scope  store.KeyScope
	Owner  string
	Period string // "day" or "month"
	What   string // "tokens" or "cost"
	Used   int64
	Limit  int64
}

func (e *BudgetError) Error() string {
	unit := "tokens"
	used, limit := fmt.Sprint(e.Used), fmt.Sprint(e.Limit)
	if e.What == "cost" {
		unit = "USD"
		used, limit = fmt.Sprintf("%.4f", float64(e.Used)/1e6), fmt.Sprintf("%.4f", float64(e.Limit)/1e6)
	}
	return fmt.Sprintf("the %s budget of %s %s for this %s is used up (%s of %s %s); further model requests are refused",
		e.What, e.Scope, e.Owner, e.Period, used, limit, unit)
}

// budgetFor returns the budget of (scope, owner): its own, else the
// server's default for the scope.
func (s *Service) budgetFor(ctx context.Context, scope store.KeyScope, owner string) (store.Budget, error) {
	b, err := s.id.LoadBudget(ctx, scope, owner)
	if err == nil {
		return b, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return store.Budget{}, err
	}
	if scope == store.ScopeTenant {
		b = s.cfg.Limits.TenantBudget
	} else {
		b = s.cfg.Limits.UserBudget
	}
	b.Scope, b.Owner = scope, owner
	return b, nil
}

// monthStart is the first day of t's UTC month.
func monthStart(t time.Time) time.Time {
	y, m, _ := t.UTC().Date()
	return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
}

// CheckBudget returns a *BudgetError when the user (owner) or its tenant
// has used up a day's or month's budget, counted from the store (so every
// server of a fleet agrees).
func (s *Service) CheckBudget(ctx context.Context, owner, tenant string) error {
	if s.id == nil || owner == "" {
		return nil
	}
	now := s.cfg.Now()
	for _, c := range []struct {
		scope store.KeyScope
		owner string
	}{{store.ScopeUser, owner}, {store.ScopeTenant, tenant}} {
		if c.owner == "" {
			continue
		}
		b, err := s.budgetFor(ctx, c.scope, c.owner)
		if err != nil {
			return fmt.Errorf("budget of %s %s: %w", c.scope, c.owner, err)
		}
		if b.TokensPerDay <= 0 && b.TokensPerMonth <= 0 && b.CostPerDayMicros <= 0 && b.CostPerMonthMicros <= 0 {
			continue
		}
		day, err := s.id.SumUsage(ctx, c.scope, c.owner, now, now)
		if err != nil {
			return fmt.Errorf("usage of %s %s: %w", c.scope, c.owner, err)
		}
		month, err := s.id.SumUsage(ctx, c.scope, c.owner, monthStart(now), now)
		if err != nil {
			return fmt.Errorf("usage of %s %s: %w", c.scope, c.owner, err)
		}
		for _, chk := range []struct {
			period, what string
			used, limit  int64
		}{
			{"day", "tokens", day.Tokens, b.TokensPerDay}, {"month", "tokens", month.Tokens, b.TokensPerMonth},
			{"day", "cost", day.CostMicros, b.CostPerDayMicros}, {"month", "cost", month.CostMicros, b.CostPerMonthMicros},
		} {
			if chk.limit > 0 && chk.used >= chk.limit {
				s.metrics.refused("budget")
				return &BudgetError{Scope: c.scope, Owner: c.owner, Period: chk.period, What: chk.what, Used: chk.used, Limit: chk.limit}
			}
		}
	}
	return nil
}

// Charge adds a model answer's usage to its session owner's (and tenant's)
// count of the day.
func (s *Service) Charge(ctx context.Context, owner, tenant, model string, u conversation.Usage) error {
	if s.id == nil || owner == "" {
		return nil
	}
	return s.id.AddUsage(ctx, []store.UsageEntry{{UserID: owner, Tenant: tenant, Day: s.cfg.Now(),
		Tokens: Tokens(u), CostMicros: s.cfg.Prices.CostMicros(model, u)}})
}

// BudgetReport is a user's or tenant's budget and what it used.
type BudgetReport = restapi.BudgetReport

// Report returns the budget and usage of (scope, owner): a user's own and
// its tenant's, or anyone's for admins.
func (s *Service) Report(ctx context.Context, by Principal, scope store.KeyScope, owner string) (BudgetReport, error) {
	if err := s.needIdentity(); err != nil {
		return BudgetReport{}, err
	}
	if !by.Admin() && !(scope == store.ScopeUser && owner == by.UserID) && !(scope == store.ScopeTenant && owner == by.Tenant) {
		return BudgetReport{}, fmt.Errorf("%w: only admins read other users' budgets", ErrForbidden)
	}
	b, err := s.budgetFor(ctx, scope, owner)
	if err != nil {
		return BudgetReport{}, err
	}
	now := s.cfg.Now()
	day, err := s.id.SumUsage(ctx, scope, owner, now, now)
	if err != nil {
		return BudgetReport{}, err
	}
	month, err := s.id.SumUsage(ctx, scope, owner, monthStart(now), now)
	if err != nil {
		return BudgetReport{}, err
	}
	return BudgetReport{Budget: b, Day: day, Month: month}, nil
}

// PutBudget sets a user's or tenant's budget (admins only).
func (s *Service) PutBudget(ctx context.Context, by Principal, b store.Budget) (store.Budget, error) {
	if err := s.needIdentity(); err != nil {
		return store.Budget{}, err
	}
	if !by.Admin() {
		return store.Budget{}, fmt.Errorf("%w: only admins set budgets", ErrForbidden)
	}
	if !b.Scope.Valid() {
		return store.Budget{}, fmt.Errorf("%w: scope %q (user or tenant)", ErrInvalid, b.Scope)
	}
	if err := ValidID(string(b.Scope), b.Owner); err != nil {
		return store.Budget{}, err
	}
	if err := s.id.PutBudget(ctx, b); err != nil {
		return store.Budget{}, err
	}
	s.access.record(store.AccessRecord{Kind: store.AccessBudgetSet, Actor: by.UserID, TokenID: by.TokenID, Subject: string(b.Scope) + ":" + b.Owner,
		Detail: fmt.Sprintf("tokens/day %d, tokens/month %d, µ$/day %d, µ$/month %d", b.TokensPerDay, b.TokensPerMonth, b.CostPerDayMicros, b.CostPerMonthMicros)})
	return b, nil
}

// DeleteBudget removes a budget (the default applies again; admins only).
func (s *Service) DeleteBudget(ctx context.Context, by Principal, scope store.KeyScope, owner string) error {
	if err := s.needIdentity(); err != nil {
		return err
	}
	if !by.Admin() {
		return fmt.Errorf("%w: only admins set budgets", ErrForbidden)
	}
	if err := s.id.DeleteBudget(ctx, scope, owner); err != nil {
		return storeErr(err, "budget")
	}
	s.access.record(store.AccessRecord{Kind: store.AccessBudgetSet, Actor: by.UserID, TokenID: by.TokenID, Subject: string(scope) + ":" + owner, Detail: "removed"})
	return nil
}

// Budgets lists every budget set (admins only).
func (s *Service) Budgets(ctx context.Context, by Principal) ([]store.Budget, error) {
	if err := s.needIdentity(); err != nil {
		return nil, err
	}
	if !by.Admin() {
		return nil, fmt.Errorf("%w: only admins list budgets", ErrForbidden)
	}
	return s.id.ListBudgets(ctx)
}
