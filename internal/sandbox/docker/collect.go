package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/moby/client"
)

// Collect removes this server's containers (label agentd.node) that no
// handle in keep names and that this process did not start — those of
// sessions deleted or settled while the server was down, and warm
// containers of a previous run — with their folders, and warm workspaces
// no container uses. Then it starts the warm pools.
func (p *Provider) Collect(ctx context.Context, keep []json.RawMessage) error {
	kept := map[string]bool{} // container ids and names
	for _, raw := range keep {
		var h Handle
		if json.Unmarshal(raw, &h) == nil && h.Container != "" {
			kept[h.Container] = true
			kept[h.Name] = true
		}
	}
	list, err := p.cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", LabelManaged+"=true", LabelNode+"="+p.opts.Node),
	})
	if err != nil {
		return fmt.Errorf("docker sandbox: list containers: %w", err)
	}
	removed := 0
	names := map[string]bool{} // containers left, by name
	for _, c := range list.Items {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		if kept[c.ID] || p.isLive(c.ID) || p.isLive(name) {
			names[name] = true
			continue
		}
		b := &box{id: c.ID, name: name}
		p.remove(ctx, b)
		removed++
		p.log.Info("container of no session removed", "container", name, "session", c.Labels[LabelSession], "pool", c.Labels[LabelPool])
	}
	// Folders of containers that are no more.
	if ents, err := os.ReadDir(p.opts.RunDir); err == nil {
		for _, e := range ents {
			name := strings.TrimSuffix(e.Name(), ".mp")
			if strings.HasPrefix(name, "agentd-") && !names[name] && !kept[name] && !p.isLive(name) {
				_ = os.RemoveAll(filepath.Join(p.opts.RunDir, e.Name()))
			}
		}
	}
	if p.opts.WarmDir != "" {
		if ents, err := os.ReadDir(p.opts.WarmDir); err == nil {
			for _, e := range ents {
				if !names[e.Name()] && !p.isLive(e.Name()) {
					_ = os.RemoveAll(filepath.Join(p.opts.WarmDir, e.Name()))
				}
			}
		}
	}
	p.log.Info("docker sandbox: leftovers collected", "containers", len(list.Items), "removed", removed)
	p.startPools()
	return nil
}

// startPools has the default kind's pool filled: after Collect, or at
// the first Create when the server did not call Collect.
func (p *Provider) startPools() {
	if p.pool == nil {
		return
	}
	_ = p.pool.Warm(p.defaultShape())
}
