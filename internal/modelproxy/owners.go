package modelproxy

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/agentd/agentd/conversation"
)

// Owners tells the proxy whose a session is, for per-user keys and
// budgets (auth.Service and the session manager). Implementations are
// safe for concurrent use.
type Owners interface {
	// Owner returns the user who owns the session and its tenant ("" for a
	// session without one).
	Owner(sessionID string) (owner, tenant string)
	// ResolveKey returns the owner's (else the tenant's) own key for the
	// provider, or "" when neither has one (the server's key applies).
	ResolveKey(ctx context.Context, owner, tenant, provider string) (string, error)
	// CheckBudget returns an error (its message is shown to the agent)
	// when the owner or its tenant has used up a day's or month's budget.
	CheckBudget(ctx context.Context, owner, tenant string) error
	// Charge counts an answer's usage to the owner and its tenant.
	Charge(ctx context.Context, owner, tenant, model string, u conversation.Usage) error
}

// UpstreamsWithUserKeys is UpstreamsFromEnv for a proxy whose users may
// bring their own keys: every provider is proxied (to its base URL or the
// public endpoint), with the server's key when it has one, else none (a
// request of a user without a key of their own is then refused).
func UpstreamsWithUserKeys(env map[string]string) (map[Provider]Upstream, error) {
	out := map[Provider]Upstream{}
	for _, s := range providerSpecs {
		base := env[s.urlVar]
		if base == "" {
			base = s.defaultURL
		}
		u, err := url.Parse(base)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%s=%q: want an http(s) URL", s.urlVar, base)
		}
		out[s.name] = Upstream{BaseURL: base, Key: env[s.keyVar]}
	}
	return out, nil
}

// errNoKey: neither the user, its tenant nor the server has a key.
var errNoKey = errors.New("no provider key")

// ownerKey fills in st's owner and the key its request is sent with: the
// owner's own, the tenant's, or the server's (serverKey).
func (p *Proxy) ownerKey(ctx context.Context, st *reqState, serverKey string) error {
	o := p.cfg.Owners
	if o == nil {
		return nil
	}
	st.owner, st.tenant = o.Owner(st.session)
	if st.owner == "" {
		if serverKey == "" {
			return errNoKey
		}
		return nil
	}
	k, err := o.ResolveKey(ctx, st.owner, st.tenant, string(st.prov))
	if err != nil {
		return err
	}
	if k != "" {
		st.key = k
	} else if serverKey == "" {
		return errNoKey
	}
	return nil
}

// charge counts an answer's usage to the session's owner.
func (p *Proxy) charge(st *reqState, model string, u conversation.Usage) {
	if p.cfg.Owners == nil || st.owner == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.cfg.Owners.Charge(ctx, st.owner, st.tenant, model, u); err != nil {
		p.log.Error("count usage to its user", "session", st.session, "user", st.owner, "err", err)
	}
}
