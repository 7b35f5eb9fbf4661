package claudeconv

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agentd/agentd/conversation"
)

// A saved Claude Code session is projects/<dir>/<session>.jsonl plus, for
// subagents, agent-<id>.jsonl files (in <session>/subagents/ for newer CLIs,
// next to the session file for some 2.0.x versions). CLIs 1.0.x wrote
// subagent lines into the session file itself, marked isSidechain. Both
// layouts convert to the events the live stream gives for the same run: the
// same block ids, the subagent's blocks in the conversation of the spawning
// tool_use id. Transcripts have no partial messages, so only complete
// upserts are emitted, and no result lines, so usage comes from the
// assistant lines and there are no query events.

// ConvertTranscript converts one session: its main file and its subagent
// files. Bad lines are reported to sink.Warn and skipped; the returned error
// is a read or sink failure.
func ConvertTranscript(main Input, subagents []Input, sink Sink) error {
	m, err := readTranscript(main, decodeLine)
	if err != nil {
		return err
	}
	var subs []*transcriptFile
	for _, in := range subagents {
		f, err := readTranscript(in, decodeLine)
		if err != nil {
			return err
		}
		subs = append(subs, f)
	}
	return runTranscript(m, subs, sink, decodeLine)
}

// ConvertTranscripts converts transcript files whose roles are not given:
// files whose lines are subagent sidechains with an agentId are subagent
// files, the others main files. Subagent files join the main file of their
// session (or the only main file); each main file is converted as one run,
// and subagent files no main file claims are converted last, on their own.
func ConvertTranscripts(inputs []Input, sink Sink) error {
	return convertTranscripts(inputs, sink, decodeLine)
}

// lineDecoder decodes one line (decodeLine; benchmarks compare others).
type lineDecoder func(s *scanner, line []byte, l *wireLine) error

func convertTranscripts(inputs []Input, sink Sink, decode lineDecoder) error {
	var mains, subs []*transcriptFile
	for _, in := range inputs {
		f, err := readTranscript(in, decode)
		if err != nil {
			return err
		}
		if f.isSubagent {
			subs = append(subs, f)
		} else {
			mains = append(mains, f)
		}
	}
	used := make([]bool, len(subs))
	for _, m := range mains {
		var mine []*transcriptFile
		for i, s := range subs {
			if !used[i] && (len(mains) == 1 || (s.sessionID != "" && s.sessionID == m.sessionID)) {
				used[i] = true
				mine = append(mine, s)
			}
		}
		if err := runTranscript(m, mine, sink, decode); err != nil {
			return err
		}
	}
	var rest []*transcriptFile
	for i, s := range subs {
		if !used[i] {
			rest = append(rest, s)
		}
	}
	if len(rest) > 0 {
		return runTranscript(nil, rest, sink, decode)
	}
	return nil
}

// transcriptFile is a transcript being read: the lines its role was read
// from (copied), then the rest of its input, read as it is converted.
type transcriptFile struct {
	name       string
	head       []numberedLine
	rest       *lineReader
	isSubagent bool
	sessionID  string
	agentID    string // subagent files: from the lines, else the file name
	prompt     string // subagent files: the first user prompt
	toolUseID  string // subagent files: the spawning call, once known
	flushed    bool
}

func readTranscript(in Input, decode lineDecoder) (*transcriptFile, error) {
	f := &transcriptFile{name: in.Name, rest: newLineReader(in.R)}
	// Read up to the first message line for the file's role and ids.
	var s scanner
	var l wireLine
	sawMessage, sidechain := false, false
	for {
		ln, ok := f.rest.next()
		if !ok {
			break
		}
		f.head = append(f.head, numberedLine{ln.no, bytes.Clone(ln.b)})
		if decode(&s, ln.b, &l) != nil {
			continue
		}
		if f.sessionID == "" {
			f.sessionID = l.SessionID
		}
		if l.Type != "user" && l.Type != "assistant" {
			continue
		}
		sawMessage, sidechain = true, l.IsSidechain
		f.isSubagent = l.IsSidechain && l.AgentID != ""
		if f.isSubagent {
			f.agentID = normalizeAgentID(l.AgentID)
			if l.Type == "user" {
				f.prompt = userPrompt(&l)
			}
		}
		break
	}
	if f.rest.err != nil {
		return nil, fmt.Errorf("read %s: %w", in.Name, f.rest.err)
	}
	if base := filepath.Base(in.Name); isAgentFileName(base) && (sidechain || !sawMessage) {
		// The lines name the agent; the file name does when they do not.
		f.isSubagent = true
		if f.agentID == "" {
			f.agentID = normalizeAgentID(base)
		}
	}
	return f, nil
}

// each calls fn for every line of f, once: those read for its role, then
// the rest of its input. A line's bytes are valid during the call.
func (f *transcriptFile) each(fn func(numberedLine) error) error {
	for _, ln := range f.head {
		if err := fn(ln); err != nil {
			return err
		}
	}
	f.head = nil
	for {
		ln, ok := f.rest.next()
		if !ok {
			break
		}
		if err := fn(ln); err != nil {
			return err
		}
	}
	if f.rest.err != nil {
		return fmt.Errorf("read %s: %w", f.name, f.rest.err)
	}
	return nil
}

// isAgentFileName reports whether base is a subagent transcript's name,
// agent-<id>.jsonl.
func isAgentFileName(base string) bool {
	id, ok := strings.CutPrefix(base, "agent-")
	if !ok {
		return false
	}
	id, ok = strings.CutSuffix(id, ".jsonl")
	if !ok || id == "" {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// userPrompt is the text of a user line that starts a sidechain.
func userPrompt(l *wireLine) string {
	if l.Message.IsString {
		return l.Message.ContentString
	}
	for _, p := range l.Message.Content {
		if p.Type == "text" {
			return p.Text
		}
	}
	return ""
}

// transcriptRun converts one session.
type transcriptRun struct {
	c        *core
	sink     Sink
	subs     []*transcriptFile
	uuidConv map[string]string // line uuid → its subagent conversation, for inline sidechains
	sc       scanner
	l        wireLine
	decode   lineDecoder
}

func runTranscript(main *transcriptFile, subs []*transcriptFile, sink Sink, decode lineDecoder) error {
	r := &transcriptRun{c: newCore(), sink: sink, subs: subs, uuidConv: make(map[string]string), decode: decode}
	r.c.usageFromMessages = true
	if main != nil {
		if err := main.each(func(ln numberedLine) error { return r.mainLine(main.name, ln) }); err != nil {
			return err
		}
	}
	// Subagents whose end the main file does not show (an interrupted run, a
	// background agent, or no main file at all).
	for _, f := range subs {
		if err := r.flush(f); err != nil {
			return err
		}
	}
	return nil
}

func (r *transcriptRun) mainLine(file string, ln numberedLine) error {
	l := &r.l
	if err := r.decode(&r.sc, ln.b, l); err != nil {
		r.sink.Warn(file, ln.no, fmt.Errorf("%w: %v", ErrMalformed, err))
		return nil
	}
	conv := conversation.MainConversation
	if l.IsSidechain {
		conv = r.sidechainConv(l)
	}
	if l.UUID != "" {
		// Only a parent in a subagent decides a line's conversation, so
		// the main conversation's lines (nearly all) are not recorded; a
		// uuid seen again in main is no longer a subagent's.
		if conv != conversation.MainConversation {
			r.uuidConv[l.UUID] = conv
		} else if len(r.uuidConv) > 0 {
			delete(r.uuidConv, l.UUID)
		}
	}
	if l.Type == "user" && conv == conversation.MainConversation {
		// A subagent's lines come before its result, as in the live stream.
		if err := r.flushFinished(l); err != nil {
			return err
		}
	}
	return r.emit(file, ln, l, conv)
}

// sidechainConv routes an inline sidechain line (CLI 1.0.x) to its subagent:
// by its parent line, or for the first line by its agentId or by matching
// its prompt to a Task call's.
func (r *transcriptRun) sidechainConv(l *wireLine) string {
	// A sidechain's root may point at the main line that spawned it; only
	// a parent that is itself in a subagent decides the conversation.
	if conv, ok := r.uuidConv[l.ParentUUID]; ok && l.ParentUUID != "" {
		return conv
	}
	subs := &r.c.subs
	if sa := subs.agent(l.AgentID); sa != nil {
		return sa.toolUseID
	}
	if l.Type == "user" {
		if sa := subs.claimPrompt(userPrompt(l)); sa != nil {
			subs.bind(sa.toolUseID, l.AgentID)
			return sa.toolUseID
		}
	}
	return subs.conversationID("", l.AgentID, orElse(l.UUID, l.ParentUUID))
}

// flushFinished converts the subagent files of the Task calls whose results
// this main-conversation user line carries.
func (r *transcriptRun) flushFinished(l *wireLine) error {
	for i := range l.Message.Content {
		p := &l.Message.Content[i]
		if p.Type != "tool_result" {
			continue
		}
		sa := r.c.subs.tool(p.ToolUseID)
		if sa == nil {
			continue
		}
		agentID := l.ToolUseResult.AgentID
		if agentID == "" {
			agentID = agentIDFromText(p.Output)
		}
		r.c.subs.bind(sa.toolUseID, agentID)
		for _, f := range r.subs {
			if f.flushed {
				continue
			}
			if f.toolUseID == sa.toolUseID || (f.agentID != "" && f.agentID == sa.agentID) {
				f.toolUseID = sa.toolUseID
				if err := r.flush(f); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// bindSpawned matches subagent files to a Task call by prompt, when the
// call is seen.
func (r *transcriptRun) bindSpawned() {
	for _, sa := range r.c.subs.order {
		if sa.claimed || sa.prompt == "" {
			continue
		}
		for _, f := range r.subs {
			if f.toolUseID == "" && f.prompt != "" && f.prompt == sa.prompt {
				f.toolUseID = sa.toolUseID
				sa.claimed = true
				r.c.subs.bind(sa.toolUseID, f.agentID)
				break
			}
		}
	}
}

// flush converts a subagent file into its subagent's conversation.
func (r *transcriptRun) flush(f *transcriptFile) error {
	if f.flushed {
		return nil
	}
	f.flushed = true
	conv := r.c.subs.conversationID(f.toolUseID, f.agentID, f.name)
	var s scanner
	var l wireLine
	return f.each(func(ln numberedLine) error {
		if err := r.decode(&s, ln.b, &l); err != nil {
			r.sink.Warn(f.name, ln.no, fmt.Errorf("%w: %v", ErrMalformed, err))
			return nil
		}
		return r.emit(f.name, ln, &l, conv)
	})
}

func (r *transcriptRun) emit(file string, ln numberedLine, l *wireLine, conv string) error {
	spawned := len(r.c.subs.order)
	if err := r.c.convertLine(l, ln.b, conv); err != nil {
		r.sink.Warn(file, ln.no, err)
	}
	if len(r.c.subs.order) != spawned {
		r.bindSpawned()
	}
	return r.c.emitTo(r.sink)
}
