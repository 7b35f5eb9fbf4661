package claudecode

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/sandbox"
)

// configRel is the session's CLAUDE_CONFIG_DIR, relative to the workspace.
// The server's workspace watcher ignores .agentd, so nothing agentd or the
// CLI writes there shows up as a workspace change.
const configRel = ".agentd/claude"

// Files agentd writes into the config folder besides Claude Code's own
// layout (skills/, agents/, commands/, rules/).
const (
	systemPromptFile = "agentd-system-prompt.md"
	mcpConfigFile    = "agentd-mcp.json"
)

// managedDirs are the config sub-folders the profile owns; they are
// emptied before the profile is written, so a skill removed from the
// profile does not linger.
var managedDirs = []string{"skills", "agents", "commands", "rules"}

// materialized is a profile turned into files and command-line arguments.
type materialized struct {
	// configDir is CLAUDE_CONFIG_DIR as the CLI sees it.
	configDir string
	// clean lists workspace paths to remove before writing files.
	clean []string
	files []sandbox.File
	// args are the profile's flags (system prompt, MCP servers, tools).
	args []string
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// materialize maps a profile onto Claude Code's user-level configuration
// in the session's config folder (CLAUDE_CONFIG_DIR, which the CLI reads as
// its ~/.claude): skills/<name>/SKILL.md (+ files), agents/<name>.md,
// commands/<name>.md, rules/<name>.md, plus the system prompt and MCP
// servers in files passed by flag. workDir is the workspace root as the
// CLI sees it.
func materialize(p profile.Profile, workDir string) (materialized, error) {
	m := materialized{configDir: path.Join(workDir, configRel)}
	var errs []error
	add := func(rel string, content string) {
		m.files = append(m.files, sandbox.File{Path: path.Join(configRel, rel), Content: []byte(content)})
	}
	for _, d := range managedDirs {
		m.clean = append(m.clean, path.Join(configRel, d))
	}
	m.clean = append(m.clean, path.Join(configRel, systemPromptFile), path.Join(configRel, mcpConfigFile))

	for _, s := range p.Skills {
		if !nameRE.MatchString(s.Name) {
			errs = append(errs, fmt.Errorf("skill name %q: use letters, digits, '.', '_' or '-'", s.Name))
			continue
		}
		add(path.Join("skills", s.Name, "SKILL.md"), withFrontMatter(s.Content, frontMatter{Name: s.Name, Description: s.Description}))
		names := make([]string, 0, len(s.Files))
		for n := range s.Files {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			clean, err := sandbox.CleanPath(n)
			if err != nil || clean == "." {
				errs = append(errs, fmt.Errorf("skill %s: file %q must stay inside the skill's folder", s.Name, n))
				continue
			}
			add(path.Join("skills", s.Name, clean), s.Files[n])
		}
	}
	for _, a := range p.Subagents {
		if !nameRE.MatchString(a.Name) {
			errs = append(errs, fmt.Errorf("subagent name %q: use letters, digits, '.', '_' or '-'", a.Name))
			continue
		}
		fm := frontMatter{Name: a.Name, Description: a.Description, Tools: strings.Join(a.Tools, ", "), Model: a.Model}
		if fm.Description == "" {
			// Claude Code ignores agent files without a description.
			fm.Description = a.Name
		}
		add(path.Join("agents", a.Name+".md"), withFrontMatter(a.Prompt, fm))
	}
	for _, c := range p.Commands {
		if !nameRE.MatchString(c.Name) {
			errs = append(errs, fmt.Errorf("command name %q: use letters, digits, '.', '_' or '-'", c.Name))
			continue
		}
		add(path.Join("commands", c.Name+".md"), withFrontMatter(c.Content, frontMatter{Description: c.Description}))
	}
	for _, r := range p.Rules {
		if !nameRE.MatchString(r.Name) {
			errs = append(errs, fmt.Errorf("rule name %q: use letters, digits, '.', '_' or '-'", r.Name))
			continue
		}
		add(path.Join("rules", strings.TrimSuffix(r.Name, ".md")+".md"), r.Content)
	}
	if strings.TrimSpace(p.SystemPrompt) != "" {
		add(systemPromptFile, p.SystemPrompt)
		m.args = append(m.args, "--append-system-prompt-file="+path.Join(m.configDir, systemPromptFile))
	}
	if len(p.MCPServers) > 0 {
		cfg, err := mcpConfig(p.MCPServers)
		if err != nil {
			errs = append(errs, err)
		} else {
			add(mcpConfigFile, string(cfg))
			m.args = append(m.args, "--mcp-config="+path.Join(m.configDir, mcpConfigFile))
		}
	}
	if len(p.AllowedTools) > 0 {
		m.args = append(m.args, "--allowedTools="+strings.Join(p.AllowedTools, ","))
	}
	if len(p.DisallowedTools) > 0 {
		m.args = append(m.args, "--disallowedTools="+strings.Join(p.DisallowedTools, ","))
	}
	return m, errors.Join(errs...)
}

// frontMatter is the YAML header of skill, agent and command files.
type frontMatter struct {
	Name        string `yaml:"name,omitempty"`
	Description string `yaml:"description,omitempty"`
	Tools       string `yaml:"tools,omitempty"`
	Model       string `yaml:"model,omitempty"`
}

// withFrontMatter prefixes body with fm as YAML front matter, unless body
// brings its own (then it is written as given) or fm is empty.
func withFrontMatter(body string, fm frontMatter) string {
	if strings.HasPrefix(body, "---\n") || strings.HasPrefix(body, "---\r\n") || fm == (frontMatter{}) {
		return body
	}
	y, err := yaml.Marshal(fm)
	if err != nil {
		// Plain strings always marshal; keep the body rather than fail.
		return body
	}
	return "---\n" + string(y) + "---\n" + body
}

// mcpServerJSON is one server in Claude Code's --mcp-config format.
type mcpServerJSON struct {
	Type    string            `json:"type"`
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

func mcpConfig(servers map[string]profile.MCPServer) ([]byte, error) {
	out := make(map[string]mcpServerJSON, len(servers))
	for name, s := range servers {
		switch s.Type {
		case "", "stdio":
			if s.Command == "" {
				return nil, fmt.Errorf("MCP server %q: a stdio server needs a command", name)
			}
			out[name] = mcpServerJSON{Type: "stdio", Command: s.Command, Args: s.Args, Env: s.Env}
		case "http", "sse":
			if s.URL == "" {
				return nil, fmt.Errorf("MCP server %q: an %s server needs a url", name, s.Type)
			}
			out[name] = mcpServerJSON{Type: s.Type, URL: s.URL, Headers: s.Headers}
		default:
			return nil, fmt.Errorf("MCP server %q: unknown type %q (stdio, http or sse)", name, s.Type)
		}
	}
	return json.MarshalIndent(map[string]any{"mcpServers": out}, "", "  ")
}

// projectDirName is the folder Claude Code keeps a working directory's
// sessions in, under projects/: the path with every character that is not
// a letter or digit replaced by '-'. (Paths longer than 200 characters get
// a hash suffix in the CLI; agentd then finds the folder by listing.)
func projectDirName(cwd string) string {
	b := []byte(cwd)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	return string(b)
}
