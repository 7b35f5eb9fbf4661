package convert

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/codex"
)

func init() {
	Register(Format{
		Name:        "codex-exec-json",
		Description: "`codex exec --json` output: thread.started, turn.*, item.* lines",
		Convert:     jsonLines(func() lineConverter { return codex.NewExecJSONConverter() }),
	})
	Register(Format{
		Name:        "codex-rollout",
		Description: "Codex session rollout files (~/.codex/sessions/…/rollout-*.jsonl)",
		Convert:     jsonLines(func() lineConverter { return codex.NewRolloutConverter() }),
	})
	Register(Format{
		Name:        "codex-app-server",
		Description: "`codex app-server` stdout: JSON-RPC notifications, approval requests and responses",
		Convert:     jsonLines(func() lineConverter { return codex.NewAppServerConverter() }),
	})
}

// lineConverter converts one line of an agent's JSON-lines output.
type lineConverter interface {
	Convert(line []byte) ([]conversation.Event, error)
}

// flusher is a lineConverter with events to emit at the end of its input
// (e.g. a turn end only known once nothing follows).
type flusher interface {
	Flush() []conversation.Event
}

// jsonLines returns a Format.Convert that feeds each input, line by line,
// to a fresh converter: blank lines are skipped, a line the converter
// rejects is reported through Warn and skipped.
func jsonLines(newConverter func() lineConverter) func([]Input, Sink) error {
	return func(inputs []Input, sink Sink) error {
		for _, in := range inputs {
			if err := convertLines(in, newConverter(), sink); err != nil {
				return err
			}
		}
		return nil
	}
}

func convertLines(in Input, c lineConverter, sink Sink) error {
	r := bufio.NewReaderSize(in.R, 64<<10)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			if err := convertOne(in.Name, n, line, c.Convert, sink); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			if f, ok := c.(flusher); ok {
				for _, e := range f.Flush() {
					if err := sink.Emit(e); err != nil {
						return fmt.Errorf("emit: %w", err)
					}
				}
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", in.Name, err)
		}
	}
}

// convertOne converts one unit (a line or a whole document) and emits its
// events; only a sink failure is returned. A converter panic is reported
// as a warning for that unit rather than aborting the run.
func convertOne(file string, line int, data []byte, conv func([]byte) ([]conversation.Event, error), sink Sink) (err error) {
	var events []conversation.Event
	func() {
		defer func() {
			if p := recover(); p != nil {
				sink.Warn(file, line, fmt.Errorf("converter panic: %v", p))
				events = nil
			}
		}()
		var cerr error
		events, cerr = conv(bytes.TrimSpace(data))
		if cerr != nil {
			sink.Warn(file, line, cerr)
		}
	}()
	for _, e := range events {
		if err := sink.Emit(e); err != nil {
			return fmt.Errorf("emit: %w", err)
		}
	}
	return nil
}

// document returns a Format.Convert for inputs that are one JSON document
// each; a document the converter rejects is reported and skipped.
func document(conv func(doc []byte) ([]conversation.Event, error)) func([]Input, Sink) error {
	return func(inputs []Input, sink Sink) error {
		for _, in := range inputs {
			data, err := io.ReadAll(in.R)
			if err != nil {
				return fmt.Errorf("read %s: %w", in.Name, err)
			}
			if err := convertOne(in.Name, 1, data, conv, sink); err != nil {
				return err
			}
		}
		return nil
	}
}
