// Command custom-backend is agentd embedded in a Go program of its own
// module, with a sandbox backend and an agent architecture the program
// adds through agentd's public extension points (docs/embedding.md):
// hostdir, a backend whose processes may start only allow-listed commands,
// and upper, an "agent" that answers each message in capitals by running tr
// in the session's sandbox.
//
//	go run . -addr 127.0.0.1:8080 -data /tmp/agentd-custom
//	curl -s localhost:8080/api/sessions -d '{"architecture":"upper"}'
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"

	"example.com/custom-backend/filter"
	"example.com/custom-backend/hostdir"
	"github.com/agentd/agentd"
	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/sandbox"
)

// config is agentd's configuration with the program's own backend (the
// default for every session) and architecture.
func config(addr, dataDir string) agentd.Config {
	return agentd.Config{
		Addr: addr, DataDir: dataDir, DisableUI: true,
		Sandbox:   hostdir.Name,
		Sandboxes: map[string]sandbox.Provider{hostdir.Name: hostdir.New(hostdir.Options{Allow: []string{"sh", "tr"}})},
		Architectures: []agent.Architecture{
			filter.Architecture{ArchName: "upper", Command: []string{"tr", "a-z", "A-Z"}},
		},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	dataDir := flag.String("data", agentd.DefaultDataDir()+"-custom", "data folder")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	srv, err := agentd.New(ctx, config(*addr, *dataDir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "custom-backend:", err)
		os.Exit(1)
	}
	if err := srv.ListenAndServe(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "custom-backend:", err)
		os.Exit(1)
	}
}
