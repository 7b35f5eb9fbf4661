package auth

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/agentd/agentd/store"
)

// Limits are the server's rate limits, quotas and default budgets (0:
// none).
type Limits struct {
	// RequestsPerSecond and Burst bound each token's requests (for OIDC
	// and the bootstrap key: each user's). Per server: in a fleet each
	// server counts on its own.
	RequestsPerSecond float64
	Burst             int
	// SessionsPerUser bounds the sessions a user owns (deleted with
	// purge=true no longer count).
	SessionsPerUser int
	// RunningPerUser and RunningPerTenant bound the sessions whose
	// environment is up (starting, ready, running or idle), counted from
	// the store, so across a fleet.
	RunningPerUser   int
	RunningPerTenant int
	// UserBudget and TenantBudget apply to users and tenants without a
	// budget of their own (Scope and Owner are ignored).
	UserBudget   store.Budget
	TenantBudget store.Budget
}

func (l Limits) validate() error {
	if l.RequestsPerSecond < 0 || l.Burst < 0 || l.SessionsPerUser < 0 || l.RunningPerUser < 0 || l.RunningPerTenant < 0 {
		return errors.New("auth: limits must not be negative")
	}
	return nil
}

// RateLimitError is a request over its token's rate: retry after
// RetryAfter.
type RateLimitError struct {
	Key        string
	RetryAfter time.Duration
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("rate limit exceeded: retry in %.1fs", e.RetryAfter.Seconds())
}

// Is makes a *RateLimitError match ErrRateLimited.
func (e *RateLimitError) Is(target error) bool { return target == ErrRateLimited }

// RetryAfterSeconds is the Retry-After header value: whole seconds, at
// least 1.
func (e *RateLimitError) RetryAfterSeconds() int {
	return max(1, int(math.Ceil(e.RetryAfter.Seconds())))
}

// limiter keeps one token bucket per key, forgetting idle ones.
type limiter struct {
	r     rate.Limit
	burst int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	adds    int
}

type bucket struct {
	lim        *rate.Limiter
	last       time.Time
	lastRecord time.Time
}

func newLimiter(perSecond float64, burst int, now func() time.Time) *limiter {
	if burst <= 0 {
		burst = max(1, int(math.Ceil(perSecond)))
	}
	return &limiter{r: rate.Limit(perSecond), burst: burst, now: now, buckets: map[string]*bucket{}}
}

// allow takes one request from key's bucket, or says how long to wait.
func (l *limiter) allow(key string) (bool, time.Duration) {
	if l.r <= 0 {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	b, ok := l.buckets[key]
	if !ok {
		b = &bucket{lim: rate.NewLimiter(l.r, l.burst)}
		l.buckets[key] = b
		if l.adds++; l.adds%1024 == 0 {
			for k, o := range l.buckets {
				if now.Sub(o.last) > 10*time.Minute {
					delete(l.buckets, k)
				}
			}
		}
	}
	b.last = now
	r := b.lim.ReserveN(now, 1)
	l.mu.Unlock()
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// Allow takes one request from p's rate; a *RateLimitError when over it.
// Refusals are counted and logged to the access log (at most one record
// per key and second).
func (s *Service) Allow(p Principal) error {
	if p.Method == MethodNone {
		return nil
	}
	ok, wait := s.limiter.allow(p.RateKey())
	if ok {
		return nil
	}
	s.metrics.refused("rate_limited")
	if s.limiter.shouldRecord(p.RateKey(), s.cfg.Now()) {
		s.access.record(store.AccessRecord{Kind: store.AccessRateLimited, Actor: p.UserID, TokenID: p.TokenID,
			Detail: fmt.Sprintf("over %.4g requests/s (burst %d)", float64(s.limiter.r), s.limiter.burst)})
	}
	return &RateLimitError{Key: p.RateKey(), RetryAfter: wait}
}

// shouldRecord limits rate-limit access records to one per key and second.
func (l *limiter) shouldRecord(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		return true
	}
	if now.Sub(b.lastRecord) < time.Second {
		return false
	}
	b.lastRecord = now
	return true
}

// CheckCreate refuses a new session of p's over SessionsPerUser.
func (s *Service) CheckCreate(ctx context.Context, p Principal) error {
	if s.cfg.Limits.SessionsPerUser == 0 || s.cfg.Sessions == nil || p.Method == MethodNone {
		return nil
	}
	all, err := s.cfg.Sessions.ListSessions(ctx)
	if err != nil {
		return fmt.Errorf("count sessions: %w", err)
	}
	n := 0
	for _, rec := range all {
		if rec.Owner == p.UserID {
			n++
		}
	}
	if n >= s.cfg.Limits.SessionsPerUser {
		return s.quotaRefused(p.UserID, "", fmt.Sprintf("%s has %d sessions, the most a user may have (delete one with purge=true)", p.UserID, n))
	}
	return nil
}

// CheckStart refuses to start the environment of a session (owner, tenant)
// while its owner or tenant already has as many up as allowed. The
// session itself is not counted.
func (s *Service) CheckStart(ctx context.Context, sessionID, owner, tenant string) error {
	l := s.cfg.Limits
	if (l.RunningPerUser == 0 && l.RunningPerTenant == 0) || s.cfg.Sessions == nil || owner == "" {
		return nil
	}
	all, err := s.cfg.Sessions.ListSessions(ctx)
	if err != nil {
		return fmt.Errorf("count sessions: %w", err)
	}
	var user, ten int
	for _, rec := range all {
		if rec.ID == sessionID || !rec.Status.Active() {
			continue
		}
		if rec.Owner == owner {
			user++
		}
		if tenant != "" && rec.Tenant == tenant {
			ten++
		}
	}
	if l.RunningPerUser > 0 && user >= l.RunningPerUser {
		return s.quotaRefused(owner, sessionID, fmt.Sprintf("%s has %d running sessions, the most a user may have", owner, user))
	}
	if l.RunningPerTenant > 0 && ten >= l.RunningPerTenant {
		return s.quotaRefused(owner, sessionID, fmt.Sprintf("tenant %s has %d running sessions, the most a tenant may have", tenant, ten))
	}
	return nil
}

func (s *Service) quotaRefused(user, session, msg string) error {
	s.metrics.refused("quota")
	s.access.record(store.AccessRecord{Kind: store.AccessQuota, Actor: user, Subject: session, Detail: msg})
	return fmt.Errorf("%w: %s", ErrQuota, msg)
}

// Metrics are the auth counters and the configured limits, for /metrics.
type Metrics struct {
	refusals *prometheus.CounterVec
	limits   *prometheus.GaugeVec
}

// Register adds the service's metrics to reg.
func (s *Service) Register(reg prometheus.Registerer) {
	m := &Metrics{
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentd_auth_refusals_total",
			Help: "Requests refused by auth, by reason (unauthenticated, forbidden, rate_limited, quota, budget)."}, []string{"reason"}),
		limits: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "agentd_limit",
			Help: "Configured limits (0: none), by name."}, []string{"name"}),
	}
	for _, r := range []string{"unauthenticated", "forbidden", "rate_limited", "quota", "budget"} {
		m.refusals.WithLabelValues(r)
	}
	l := s.cfg.Limits
	for name, v := range map[string]float64{
		"requests_per_second": l.RequestsPerSecond, "burst": float64(s.limiter.burst),
		"sessions_per_user": float64(l.SessionsPerUser), "running_per_user": float64(l.RunningPerUser),
		"running_per_tenant":  float64(l.RunningPerTenant),
		"user_tokens_per_day": float64(l.UserBudget.TokensPerDay), "user_tokens_per_month": float64(l.UserBudget.TokensPerMonth),
		"tenant_tokens_per_day": float64(l.TenantBudget.TokensPerDay), "tenant_tokens_per_month": float64(l.TenantBudget.TokensPerMonth),
		"user_cost_micros_per_day": float64(l.UserBudget.CostPerDayMicros), "user_cost_micros_per_month": float64(l.UserBudget.CostPerMonthMicros),
		"tenant_cost_micros_per_day": float64(l.TenantBudget.CostPerDayMicros), "tenant_cost_micros_per_month": float64(l.TenantBudget.CostPerMonthMicros),
	} {
		m.limits.WithLabelValues(name).Set(v)
	}
	reg.MustRegister(m.refusals, m.limits)
	s.metrics = m
}

// Refused counts a refusal seen by the transport layer.
func (s *Service) Refused(reason string) { s.metrics.refused(reason) }

func (m *Metrics) refused(reason string) {
	if m != nil {
		m.refusals.WithLabelValues(reason).Inc()
	}
}
