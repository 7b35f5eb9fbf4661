package convert

import "github.com/agentd/agentd/internal/agent/claudecode"

// Claude Code formats: the live stream-json output and saved transcripts.
func init() {
	Register(Format{
		Name: "claude-stream-json",
		Description: "Claude Code `--output-format stream-json --verbose` output (with or without " +
			"--include-partial-messages), one file per process; a single pretty-printed JSON message also works",
		Convert: func(inputs []Input, sink Sink) error {
			for _, in := range inputs {
				if err := claudecode.ConvertStream(claudecode.Input{Name: in.Name, R: in.R}, sink); err != nil {
					return err
				}
			}
			return nil
		},
	})
	Register(Format{
		Name: "claude-transcript",
		Description: "Claude Code saved session: projects/<dir>/<session>.jsonl plus its subagent " +
			"agent-*.jsonl files, given together in any order",
		Convert: func(inputs []Input, sink Sink) error {
			in := make([]claudecode.Input, len(inputs))
			for i, x := range inputs {
				in[i] = claudecode.Input{Name: x.Name, R: x.R}
			}
			return claudecode.ConvertTranscripts(in, sink)
		},
	})
}
