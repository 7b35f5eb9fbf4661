package agent

import "context"

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
