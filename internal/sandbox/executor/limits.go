package executor

import (
	"errors"
	"fmt"

	"github.com/agentd/agentd/internal/sandbox/executor/cgroup"
	"github.com/agentd/agentd/sandbox"
)

// LimitMode says how an environment's limits are enforced.
type LimitMode string

const (
	// LimitsAuto: cgroups where this machine allows (root, or a delegated
	// group), else rlimits.
	LimitsAuto LimitMode = ""
	// LimitsCgroup: cgroups or New fails.
	LimitsCgroup LimitMode = "cgroup"
	// LimitsRlimit: rlimits only. RLIMIT_NPROC bounds processes, per uid:
	// only with a user pool (a uid per environment). Memory and CPU stay
	// unbounded: RLIMIT_AS breaks runtimes that reserve address space
	// (V8, Go), and RLIMIT_CPU is a total, not a rate.
	LimitsRlimit LimitMode = "rlimit"
	// LimitsOff: nothing is enforced.
	LimitsOff LimitMode = "off"
)

// ParseLimitMode parses "auto" (or ""), "cgroup", "rlimit" or "off".
func ParseLimitMode(s string) (LimitMode, error) {
	switch s {
	case "", "auto":
		return LimitsAuto, nil
	case "cgroup", "rlimit", "off":
		return LimitMode(s), nil
	}
	return "", fmt.Errorf("unknown limit mode %q (auto, cgroup, rlimit, off)", s)
}

// reservedThreads is how many OS threads an executor creates up front when
// a process limit applies to it (see internal/executor reserveThreads).
const reservedThreads = 16

// setupLimits decides how limits are enforced.
func (p *Provider) setupLimits() error {
	mode := p.opts.LimitMode
	if mode == LimitsAuto || mode == LimitsCgroup {
		m, err := cgroup.Detect(cgroup.Options{Parent: p.opts.CgroupParent})
		switch {
		case err == nil:
			p.cg = m
			p.limitsHow = fmt.Sprintf("%v (%v)", m.Version(), m.Controllers())
			return nil
		case mode == LimitsCgroup:
			return fmt.Errorf("limits: %w", err)
		case !errors.Is(err, cgroup.ErrUnavailable):
			return fmt.Errorf("limits: %w", err)
		}
		p.log.Info("cgroups unavailable, limits fall back to rlimits", "why", err)
		mode = LimitsRlimit
	}
	switch mode {
	case LimitsRlimit:
		p.rlimits = true
		if p.pool != nil {
			p.limitsHow = "rlimit (RLIMIT_NPROC per session uid; memory and CPU unbounded)"
		} else {
			p.limitsHow = "none (no cgroups, and RLIMIT_NPROC needs a uid per session: use a user pool)"
		}
	case LimitsOff:
		p.limitsHow = "none (off)"
	}
	return nil
}

// LimitsEnforcement says how this provider enforces limits, for logs and
// docs: "cgroup v1 ([pids memory cpu freezer])", "rlimit (…)", "none (…)".
func (p *Provider) LimitsEnforcement() string { return p.limitsHow }

// limits are an environment's limits: the spec's non-zero fields over the
// provider's defaults.
func (p *Provider) limits(spec sandbox.Spec) sandbox.Limits {
	l := p.opts.Limits
	if spec.Limits.MemoryBytes > 0 {
		l.MemoryBytes = spec.Limits.MemoryBytes
	}
	if spec.Limits.Pids > 0 {
		l.Pids = spec.Limits.Pids
	}
	if spec.Limits.CPUPercent > 0 {
		l.CPUPercent = spec.Limits.CPUPercent
	}
	return l
}

// RemoveCgroupParent deletes the provider's parent cgroup when no
// environment's group is left in it (for tests and short-lived servers).
func (p *Provider) RemoveCgroupParent() error {
	if p.cg == nil {
		return nil
	}
	return p.cg.RemoveParent()
}
