// Command goref reduces event logs with the Go reducer (package
// conversation) so the TypeScript client's tests can check that both
// reducers agree. Input on stdin: a JSON array of logs, each an array of
// events. Output on stdout: a JSON array of the reduced states.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/agentd/agentd/conversation"
)

func main() {
	var logs [][]conversation.Event
	if err := json.NewDecoder(os.Stdin).Decode(&logs); err != nil {
		fmt.Fprintln(os.Stderr, "goref: decode input:", err)
		os.Exit(2)
	}
	states := make([]conversation.State, 0, len(logs))
	for _, events := range logs {
		st, _ := conversation.Reduce(events)
		states = append(states, st)
	}
	if err := json.NewEncoder(os.Stdout).Encode(states); err != nil {
		fmt.Fprintln(os.Stderr, "goref: encode output:", err)
		os.Exit(1)
	}
}
