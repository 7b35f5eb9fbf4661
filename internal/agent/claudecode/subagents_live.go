package claudecode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/claudecode/claudeconv"
)

// Live subagents. Claude Code's stream-json output carries a subagent's
// prompt, tool calls and tool results (lines with parent_tool_use_id) but
// not its own text messages. The subagent's transcript file
// (projects/<dir>/<session>/subagents/agent-<id>.jsonl; older CLIs put it
// next to the session file) has everything, written about every 100 ms.
//
// So while a subagent runs, agentd follows its transcript and emits the
// subagent's blocks from it, in the transcript's order, with the ids the
// transcript converter gives (the same as the stream's, for the blocks both
// have). The stream's subagent events are held back; when the Task call
// ends (its result line, or the CLI's exit) the transcript is read to its
// end, and held events for blocks the transcript did not give are emitted
// then, so a missing or unreadable transcript costs liveness, not blocks.
// No block is emitted twice. The result: the subagent's blocks are the ones
// the saved transcript converts to, in the same order.

// liveSubagent follows one subagent (conversation id = the Task tool_use
// id). It is owned by the process's reader goroutine.
type liveSubagent struct {
	id      string
	agentID string
	file    string // workspace path of its transcript, once found
	off     int    // bytes of the file converted so far (whole lines)
	conv    *claudeconv.SubagentConverter

	fromFile map[string]bool      // block ids the transcript gave
	held     []conversation.Event // stream events waiting for the transcript
	pending  map[string]bool      // uuids of stream lines the transcript has not shown yet
	inFile   map[string]bool      // uuids of the transcript's lines
	answered bool                 // the transcript's last message is a final answer
	done     bool
	started  time.Time
}

func (p *process) trackSubagent(toolUseID string) {
	if toolUseID == "" || p.rd.subs[toolUseID] != nil {
		return
	}
	sa := &liveSubagent{id: toolUseID, conv: claudeconv.NewSubagentConverter(toolUseID), fromFile: make(map[string]bool),
		pending: make(map[string]bool), inFile: make(map[string]bool), started: time.Now()}
	if _, ok := p.r.host.(agent.ArtifactPutter); ok {
		sa.conv.KeepImages()
	}
	p.rd.subs[toolUseID] = sa
	p.rd.subOrder = append(p.rd.subOrder, sa)
}

func (p *process) activeSubagents() bool {
	for _, sa := range p.rd.subOrder {
		if !sa.done {
			return true
		}
	}
	return false
}

// streamUUID notes that the stream showed a message line of the subagent.
func (sa *liveSubagent) streamUUID(uuid string) {
	if !sa.done && !sa.inFile[uuid] {
		sa.pending[uuid] = true
	}
}

// hold keeps a stream event of the subagent's conversation back until the
// subagent ends. It reports false for events that go out at once: logs and
// the like, and block events once the subagent ended (for blocks the
// transcript did not give).
func (sa *liveSubagent) hold(e conversation.Event) bool {
	id, ok := eventBlockID(e)
	if !ok {
		return false
	}
	if sa.done {
		return sa.fromFile[id] // already shown from the transcript: drop
	}
	sa.held = append(sa.held, e)
	return true
}

// eventBlockID returns the block a block event addresses.
func eventBlockID(e conversation.Event) (string, bool) {
	switch e.Type {
	case conversation.TypeBlockUpsert:
		var p struct {
			Block struct {
				ID string `json:"id"`
			} `json:"block"`
		}
		if json.Unmarshal(e.Payload, &p) != nil {
			return "", false
		}
		return p.Block.ID, p.Block.ID != ""
	case conversation.TypeBlockDelta:
		var p conversation.BlockDelta
		if json.Unmarshal(e.Payload, &p) != nil {
			return "", false
		}
		return p.BlockID, p.BlockID != ""
	}
	return "", false
}

// pollSubagents converts what the running subagents' transcripts gained.
func (p *process) pollSubagents() {
	for _, sa := range p.rd.subOrder {
		if !sa.done {
			p.pollSubagent(sa)
		}
	}
}

// transcriptCandidates are the places a subagent's transcript may be.
func (p *process) transcriptCandidates(agentID string) []string {
	p.mu.Lock()
	id, dir := p.shared.sessionID, p.shared.projDir
	p.mu.Unlock()
	if id == "" || dir == "" || agentID == "" {
		return nil
	}
	name := "agent-" + agentID + ".jsonl"
	return []string{
		path.Join(projectsRel, dir, id, "subagents", name),
		path.Join(projectsRel, dir, name),
	}
}

func (p *process) pollSubagent(sa *liveSubagent) {
	if sa.agentID == "" {
		// The converter learns the agent id from task_started or the Task
		// result; it is the one place that maps subagent ids.
		sa.agentID = p.rd.conv.AgentID(sa.id)
		if sa.agentID == "" {
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	env := p.r.host.Env()
	var data []byte
	if sa.file != "" {
		b, err := env.ReadFile(ctx, sa.file)
		if err != nil {
			return
		}
		data = b
	} else {
		for _, f := range p.transcriptCandidates(sa.agentID) {
			if b, err := env.ReadFile(ctx, f); err == nil {
				sa.file, data = f, b
				break
			}
		}
		if sa.file == "" {
			return
		}
	}
	if len(data) <= sa.off {
		return
	}
	chunk := data[sa.off:]
	last := bytes.LastIndexByte(chunk, '\n')
	if last < 0 {
		return // a line being written
	}
	chunk = chunk[:last+1]
	sa.off += last + 1
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		line := bytes.TrimSpace(chunk[:i])
		chunk = chunk[i+1:]
		if len(line) == 0 {
			continue
		}
		evs, err := sa.conv.Convert(line)
		if ims := sa.conv.TakeImages(); len(ims) > 0 {
			p.storeImages(ims)
		}
		if errors.Is(err, claudeconv.ErrMalformed) {
			continue // the CLI's own file; a bad line is skipped, as the transcript converter does
		}
		l := sa.conv.Line()
		if l.UUID != "" {
			delete(sa.pending, l.UUID)
			sa.inFile[l.UUID] = true
		}
		if l.Type == "user" || l.Type == "assistant" {
			sa.answered = l.Type == "assistant" && !l.ToolUse
		}
		for _, e := range evs {
			if e.Context.ConversationID != sa.id {
				continue
			}
			id, ok := eventBlockID(e)
			if !ok {
				continue // usage, logs: the stream reports those
			}
			if e.Type == conversation.TypeBlockUpsert {
				sa.fromFile[id] = true
			} else if !sa.fromFile[id] {
				continue
			}
			p.addPolled(e)
		}
	}
}

// finalizeSubagent reads the subagent's transcript to its end (with wait,
// waiting up to FlushTimeout for the CLI's buffered writes), emits the held stream events the transcript did not cover, and
// saves the transcript with the session.
func (p *process) finalizeSubagent(sa *liveSubagent, wait bool) {
	deadline := time.Now().Add(p.r.opts.FlushTimeout)
	for {
		p.pollSubagent(sa)
		complete := sa.file != "" && len(sa.pending) == 0 && sa.answered
		if complete || !wait || time.Now().After(deadline) {
			break
		}
		if sa.agentID == "" && time.Since(sa.started) > p.r.opts.FlushTimeout {
			break // nothing names its transcript
		}
		time.Sleep(20 * time.Millisecond)
	}
	sa.done = true
	for _, e := range sa.held {
		if id, _ := eventBlockID(e); !sa.fromFile[id] {
			p.addSeq(e)
		}
	}
	sa.held = nil
	if sa.file == "" {
		return
	}
	p.mu.Lock()
	sessionID := p.shared.sessionID
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if data, err := p.r.host.Env().ReadFile(ctx, sa.file); err == nil {
		name := path.Join(sessionID, "subagents", path.Base(sa.file))
		if err := p.r.host.SaveTranscript(ctx, name, data); err != nil {
			p.r.host.Logger().Warn("save subagent transcript", "err", err)
		}
	}
}
