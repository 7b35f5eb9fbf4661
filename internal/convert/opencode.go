package convert

import (
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/opencode"
)

func init() {
	Register(Format{
		Name:        "opencode-run-json",
		Description: "`opencode run --format json` output: step_start, text, reasoning, tool_use, step_finish and error lines",
		Convert:     jsonLines(func() lineConverter { return opencode.NewRunJSONConverter() }),
	})
	Register(Format{
		Name:        "opencode-events",
		Description: "`opencode serve` /event stream: one event JSON per line (SSE data: lines also accepted)",
		Convert:     jsonLines(func() lineConverter { return opencode.NewEventsConverter() }),
	})
	Register(Format{
		Name:        "opencode-export",
		Description: "`opencode export <session>` JSON: info + messages[].info + parts",
		Convert: document(func(doc []byte) ([]conversation.Event, error) {
			return opencode.ConvertExport(doc)
		}),
	})
}
