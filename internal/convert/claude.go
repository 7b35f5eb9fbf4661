package convert

import "github.com/agentd/agentd/internal/agent/claudecode/claudeconv"

// Claude Code formats: the live stream-json output and saved transcripts.
func init() {
	Register(Format{
		Name: "claude-stream-json",
		Description: "Claude Code `--output-format stream-json --verbose` output (with or without " +
			"--include-partial-messages), one file per process; a single pretty-printed JSON message also works",
		Convert: func(inputs []Input, sink Sink) error {
			for _, in := range inputs {
				if err := claudeconv.ConvertStream(claudeconv.Input{Name: in.Name, R: in.R}, sink); err != nil {
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
			in := make([]claudeconv.Input, len(inputs))
			for i, x := range inputs {
				in[i] = claudeconv.Input{Name: x.Name, R: x.R}
			}
			return claudeconv.ConvertTranscripts(in, sink)
		},
	})
}
