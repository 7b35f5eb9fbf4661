// Command goref reduces event logs with the Go reducer (package
// conversation) so the TypeScript client's tests can check that both
// reducers agree. Input on stdin: a JSON array of logs, each an array of
// events. Output on stdout: a JSON array of the reduced states.
//
// With -seed it outputs, for each log, the seed's per-type Socket.IO
// messages agentd sends for it (internal/seedproto, flushed after every
// event and at the end) with the reduced state: [{messages, state}], each
// message {event, data} (data absent for the session:event envelope).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/seedproto"
)

type message struct {
	Event string `json:"event"`
	Data  any    `json:"data,omitempty"`
}

type seedLog struct {
	Messages []message          `json:"messages"`
	State    conversation.State `json:"state"`
}

func main() {
	seed := flag.Bool("seed", false, "output the seed's per-type messages too")
	flag.Parse()
	var logs [][]conversation.Event
	if err := json.NewDecoder(os.Stdin).Decode(&logs); err != nil {
		fmt.Fprintln(os.Stderr, "goref: decode input:", err)
		os.Exit(2)
	}
	var out any
	if *seed {
		res := make([]seedLog, 0, len(logs))
		for _, events := range logs {
			m := seedproto.New("s")
			var msgs []message
			add := func(ms []seedproto.Message) {
				for _, x := range ms {
					msgs = append(msgs, message{Event: x.Event, Data: x.Data})
				}
			}
			for _, e := range events {
				add(m.Map(e))
				add(m.Flush(false))
			}
			add(m.Flush(true))
			st, _ := conversation.Reduce(events)
			res = append(res, seedLog{Messages: msgs, State: st})
		}
		out = res
	} else {
		states := make([]conversation.State, 0, len(logs))
		for _, events := range logs {
			st, _ := conversation.Reduce(events)
			states = append(states, st)
		}
		out = states
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "goref: encode output:", err)
		os.Exit(1)
	}
}
