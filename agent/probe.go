package agent

import (
	"context"
	"errors"
)

// Prober is implemented by architectures that depend on an external agent
// CLI: Probe reports the CLI's version, or an error when it is missing or
// broken. Architectures without it are always available.
type Prober interface {
	Probe(ctx context.Context) (version string, err error)
}

// Info describes an architecture for GET /api/architectures.
type Info struct {
	Name      string   `json:"name"`
	Aliases   []string `json:"aliases"`
	Available bool     `json:"available"`
	Version   string   `json:"version,omitempty"`
	Problem   string   `json:"problem,omitempty"`
}

// ErrNotInstalled is what a Prober's error matches (errors.Is) when the
// agent CLI is not on PATH at all, as opposed to one that is there but
// broken. Sessions of such an architecture are refused at creation.
var ErrNotInstalled = errors.New("agent CLI not installed")

// NotInstalled is the Prober error for a CLI missing from PATH.
func NotInstalled(command string) error { return notInstalled(command) }

type notInstalled string

func (e notInstalled) Error() string        { return string(e) + " is not installed or not on PATH" }
func (e notInstalled) Is(target error) bool { return target == ErrNotInstalled }
