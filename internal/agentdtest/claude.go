package agentdtest

import "github.com/agentd/agentd/profile"

// CountSlowlyScript is a mock-llm script for Claude Code turns that take a
// while (restart and chaos tests): "count slowly" makes the model call Bash
// with a command printing "line 1" … "line 30" 100 ms apart, and answer
// "Counted to thirty." once it has the output.
const CountSlowlyScript = `
rules:
  - name: count
    match: {userContains: "count slowly", noToolResult: true}
    reply:
      chunkSize: 5
      content:
        - text: "Counting now."
        - type: tool_use
          name: Bash
          input: {command: "for i in $(seq 1 30); do echo line $i; sleep 0.1; done", description: "Count slowly"}
  - name: counted
    match: {toolResult: {name: Bash, contains: "line 30"}}
    reply:
      chunkSize: 5
      text: "Counted to thirty."
default:
  text: "no rule for {{lastUserText}}"
`

// CountSlowlyProfile lets Bash run without a prompt. The CLI's model calls
// may go through the server (its model proxy): a few retries ride over the
// moment a killed server is down.
var CountSlowlyProfile = profile.Profile{ID: "auto", Name: "Auto", AllowedTools: []string{"Bash"},
	EnvironmentVariables: map[string]string{"CLAUDE_CODE_MAX_RETRIES": "4"}}
