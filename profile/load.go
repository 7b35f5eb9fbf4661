package profile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// LoadError names a profile file that could not be used.
type LoadError struct {
	File string
	Err  error
}

func (e *LoadError) Error() string { return fmt.Sprintf("profile %s: %v", e.File, e.Err) }
func (e *LoadError) Unwrap() error { return e.Err }

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// LoadDir reads every *.yaml, *.yml and *.json file of dir (not recursive),
// one profile a file. Files that fail to parse or validate are returned as
// *LoadError and skipped; the others are returned sorted by id. A profile
// without an id takes its file name (without extension). Two files with the
// same id: the first by file name wins, the second is an error.
func LoadDir(dir string) ([]Profile, []error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, []error{&LoadError{File: dir, Err: err}}
	}
	var out []Profile
	var errs []error
	seen := map[string]string{}
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		p, err := LoadFile(path)
		if err != nil {
			errs = append(errs, &LoadError{File: path, Err: err})
			continue
		}
		if prev, dup := seen[p.ID]; dup {
			errs = append(errs, &LoadError{File: path, Err: fmt.Errorf("duplicate id %q (already defined in %s)", p.ID, prev)})
			continue
		}
		seen[p.ID] = path
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, errs
}

// LoadFile reads one profile file (YAML or JSON, by extension).
func LoadFile(path string) (Profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Profile{}, err
	}
	var p Profile
	if strings.EqualFold(filepath.Ext(path), ".json") {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return Profile{}, fmt.Errorf("parse JSON: %w", err)
		}
	} else {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&p); err != nil {
			return Profile{}, fmt.Errorf("parse YAML: %w", err)
		}
	}
	if p.ID == "" {
		p.ID = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	if p.Name == "" {
		p.Name = p.ID
	}
	if err := p.Validate(); err != nil {
		return Profile{}, err
	}
	return p, nil
}

// Validate checks what a server relies on: a usable id, well-formed MCP
// servers, workspace files inside the workspace.
func (p Profile) Validate() error {
	var errs []error
	if !idPattern.MatchString(p.ID) {
		errs = append(errs, fmt.Errorf("id %q: use letters, digits, '.', '_' or '-'", p.ID))
	}
	for name, m := range p.MCPServers {
		switch m.Type {
		case "stdio", "":
			if m.Command == "" {
				errs = append(errs, fmt.Errorf("mcpServers.%s: stdio server needs a command", name))
			}
		case "http", "sse":
			if m.URL == "" {
				errs = append(errs, fmt.Errorf("mcpServers.%s: %s server needs a url", name, m.Type))
			}
		default:
			errs = append(errs, fmt.Errorf("mcpServers.%s: unknown type %q (stdio, http or sse)", name, m.Type))
		}
	}
	for i, f := range p.DefaultWorkspaceFiles {
		if f.Path == "" || strings.HasPrefix(f.Path, "/") || strings.Contains(f.Path, "..") {
			errs = append(errs, fmt.Errorf("defaultWorkspaceFiles[%d]: path %q must be relative and stay in the workspace", i, f.Path))
		}
	}
	if sb := p.Sandbox; sb != nil {
		if sb.MemoryBytes < 0 || sb.Pids < 0 || sb.CPUPercent < 0 {
			errs = append(errs, errors.New("sandbox: limits must not be negative"))
		}
		if strings.ContainsAny(sb.Image, " \t\n") {
			errs = append(errs, fmt.Errorf("sandbox.image %q: not an image reference", sb.Image))
		}
	}
	for _, list := range [][]named{skillsNamed(p.Skills), subagentsNamed(p.Subagents), commandsNamed(p.Commands), rulesNamed(p.Rules)} {
		for _, n := range list {
			if !idPattern.MatchString(n.name) {
				errs = append(errs, fmt.Errorf("%s name %q: use letters, digits, '.', '_' or '-'", n.kind, n.name))
			}
		}
	}
	return errors.Join(errs...)
}

type named struct{ kind, name string }

func skillsNamed(s []Skill) (out []named) {
	for _, x := range s {
		out = append(out, named{"skill", x.Name})
	}
	return
}
func subagentsNamed(s []Subagent) (out []named) {
	for _, x := range s {
		out = append(out, named{"subagent", x.Name})
	}
	return
}
func commandsNamed(s []Command) (out []named) {
	for _, x := range s {
		out = append(out, named{"command", x.Name})
	}
	return
}
func rulesNamed(s []Rule) (out []named) {
	for _, x := range s {
		out = append(out, named{"rule", x.Name})
	}
	return
}
