// Package agentcli holds what the architectures driving an external agent
// CLI (codex, gemini, opencode) share outside their protocols: the
// defaults of their options, probing the CLI with --version, reading a
// variable of the session's environment, and the profile's instructions as
// one text. Everything in it is stateless and safe for concurrent use.
package agentcli

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/sandbox"
)

// Defaults of the architectures' options.
const (
	DefaultStopGrace    = 3 * time.Second
	DefaultStartTimeout = 2 * time.Minute
	// ProbeTimeout bounds one `<cli> --version`.
	ProbeTimeout = 20 * time.Second
)

// Command returns cmd, or def when cmd is empty.
func Command(cmd, def string) string {
	if cmd != "" {
		return cmd
	}
	return def
}

// StopGrace returns d, or DefaultStopGrace when d is not positive.
func StopGrace(d time.Duration) time.Duration { return positive(d, DefaultStopGrace) }

// StartTimeout returns d, or DefaultStartTimeout when d is not positive.
func StartTimeout(d time.Duration) time.Duration { return positive(d, DefaultStartTimeout) }

func positive(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

var versionRE = regexp.MustCompile(`\d+\.\d+\.\d+[0-9A-Za-z.+-]*`)

// ParseVersion extracts the first x.y.z version (with any suffix) from a
// CLI's --version output; "" when there is none.
func ParseVersion(out string) string { return versionRE.FindString(out) }

// Probe runs `command --version` on this host (the local sandbox runs
// agents with the server's PATH) and returns the version it prints. It
// gives up after ProbeTimeout.
func Probe(ctx context.Context, command string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, command, "--version").Output()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return "", agent.NotInstalled(command)
		}
		return "", fmt.Errorf("%s --version: %w", command, err)
	}
	v := ParseVersion(string(out))
	if v == "" {
		return "", fmt.Errorf("%s --version printed no version: %q", command, strings.TrimSpace(string(out)))
	}
	return v, nil
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// maxEnvValue bounds what ReadEnv keeps of a value.
const maxEnvValue = 64 << 10

// ReadEnv returns the value of an environment variable as processes in env
// see it ("" when unset). A runner cannot read the sandbox's environment
// otherwise, and asking inside is what the agent will see anyway.
func ReadEnv(ctx context.Context, env sandbox.Environment, name string) (string, error) {
	if !envNameRE.MatchString(name) {
		return "", fmt.Errorf("bad variable name %q", name)
	}
	p, err := env.Exec(ctx, sandbox.Cmd{Argv: []string{"sh", "-c", `printf '%s' "${` + name + `-}"`}})
	if err != nil {
		return "", err
	}
	var out []byte
	for c := range p.Output() {
		if c.Stream == sandbox.Stdout && len(out) < maxEnvValue {
			out = append(out, c.Data...)
		}
	}
	st, err := p.Wait(context.WithoutCancel(ctx))
	if err != nil {
		return "", err
	}
	if !st.Success() {
		return "", fmt.Errorf("sh exited with %d", st.Code)
	}
	return string(out), nil
}

// Instructions joins the profile's system prompt and rules (each under a
// "# name" heading), blank-line separated; "" when there are none.
func Instructions(p profile.Profile) string {
	parts := []string{}
	if s := strings.TrimSpace(p.SystemPrompt); s != "" {
		parts = append(parts, s)
	}
	for _, r := range p.Rules {
		if c := strings.TrimSpace(r.Content); c != "" {
			parts = append(parts, "# "+r.Name+"\n\n"+c)
		}
	}
	return strings.Join(parts, "\n\n")
}
