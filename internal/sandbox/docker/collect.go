package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/sandbox/container"
)

// Collect removes this server's containers (label agentd.node) that no
// handle in keep names and that this process did not start — those of
// sessions deleted or settled while the server was down, and warm
// containers of a previous run — with their folders, and warm workspaces
// no container uses. Then it starts the warm pools.
func (p *Provider) Collect(ctx context.Context, keep []json.RawMessage) error {
	kept := container.Kept(keep, func(h Handle) []string { // container ids and names
		if h.Container == "" {
			return nil
		}
		return []string{h.Container, h.Name}
	})
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
		if kept[c.ID] || p.live.Has(c.ID) || p.live.Has(name) {
			names[name] = true
			continue
		}
		b := &box{id: c.ID, name: name}
		p.remove(ctx, b)
		removed++
		p.log.Info("container of no session removed", "container", name, "session", c.Labels[LabelSession], "pool", c.Labels[LabelPool])
	}
	container.RemoveStaleDirs(p.opts.RunDir, func(name string) bool { return names[name] || kept[name] || p.live.Has(name) })
	if p.opts.WarmDir != "" {
		if ents, err := os.ReadDir(p.opts.WarmDir); err == nil {
			for _, e := range ents {
				if !names[e.Name()] && !p.live.Has(e.Name()) {
					_ = os.RemoveAll(filepath.Join(p.opts.WarmDir, e.Name()))
				}
			}
		}
	}
	p.log.Info("docker sandbox: leftovers collected", "containers", len(list.Items), "removed", removed)
	p.pools.Fill()
	return nil
}
