package claudeconv

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/convert/synth"
)

// The hand-written scanner (jsonscan.go, decodeLine) against encoding/json
// doing the same job: decodeStd fills the same wireLine with json.Unmarshal
// into structs (json.RawMessage where a value is kept raw or has two
// shapes), and BenchmarkDecoders converts the generated transcript of
// docs/benchmarks.md to blocks, end to end, with each. Built with
// GOEXPERIMENT=jsonv2, encoding/json runs on the json/v2 engine and
// wire_v2_test.go adds the json/v2 API.

// lineDecoders are the decoders BenchmarkDecoders compares.
var lineDecoders = map[string]lineDecoder{
	"scanner":       decodeLine,
	"encoding-json": stdDecoder[json.RawMessage](json.Unmarshal),
}

type stdLine[R ~[]byte] struct {
	Type              string         `json:"type"`
	Subtype           string         `json:"subtype"`
	UUID              string         `json:"uuid"`
	ParentUUID        string         `json:"parentUuid"`
	SessionID         string         `json:"session_id"`
	SessionID2        string         `json:"sessionId"`
	Timestamp         string         `json:"timestamp"`
	ParentToolUseID   string         `json:"parent_tool_use_id"`
	AgentID           string         `json:"agentId"`
	SourceToolUseID   string         `json:"sourceToolUseID"`
	Error             string         `json:"error"`
	APIErrorStatus    int64          `json:"apiErrorStatus"`
	IsSidechain       bool           `json:"isSidechain"`
	IsMeta            bool           `json:"isMeta"`
	IsSynthetic       bool           `json:"isSynthetic"`
	IsCompactSummary  bool           `json:"isCompactSummary"`
	IsAPIErrorMessage bool           `json:"isApiErrorMessage"`
	Message           *stdMessage[R] `json:"message"`
	ToolUseResult     R              `json:"toolUseResult"`
	ToolUseResult2    R              `json:"tool_use_result"`
	Event             R              `json:"event"`
}

type stdMessage[R ~[]byte] struct {
	ID      string     `json:"id"`
	Model   string     `json:"model"`
	Role    string     `json:"role"`
	Usage   *wireUsage `json:"usage"`
	Content R          `json:"content"`
}

type stdPart[R ~[]byte] struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	Thinking  string `json:"thinking"`
	ID        string `json:"id"`
	Name      string `json:"name"`
	Input     R      `json:"input"`
	ToolUseID string `json:"tool_use_id"`
	IsError   bool   `json:"is_error"`
	Content   R      `json:"content"`
	Source    *struct {
		MediaType string `json:"media_type"`
	} `json:"source"`
}

type stdToolInput struct {
	Prompt       string `json:"prompt"`
	SubagentType string `json:"subagent_type"`
	Description  string `json:"description"`
	Skill        string `json:"skill"`
	Command      string `json:"command"`
}

type stdToolUseResult[R ~[]byte] struct {
	AgentID         string  `json:"agentId"`
	Status          string  `json:"status"`
	IsAsync         bool    `json:"isAsync"`
	TotalDurationMs float64 `json:"totalDurationMs"`
	DurationMs      float64 `json:"durationMs"`
	CommandName     string  `json:"commandName"`
	Content         R       `json:"content"`
}

type stdContentPart struct {
	Type   string `json:"type"`
	Text   string `json:"text"`
	Source *struct {
		MediaType string `json:"media_type"`
	} `json:"source"`
}

// stdDecoder returns a lineDecoder doing decodeLine's job with unmarshal
// (json.Unmarshal, or json/v2's). It reads what the generated transcript
// holds exactly as decodeLine does (the benchmark checks the output); it
// does not reproduce decodeLine's leniency for values of unexpected types.
// Tool inputs are taken as compact, as Claude Code writes them.
func stdDecoder[R ~[]byte](unmarshal func([]byte, any) error) lineDecoder {
	return func(_ *scanner, line []byte, l *wireLine) error {
		var x stdLine[R]
		if err := unmarshal(line, &x); err != nil {
			return err
		}
		*l = wireLine{Type: x.Type, Subtype: x.Subtype, UUID: x.UUID, ParentUUID: x.ParentUUID,
			SessionID: orElse(x.SessionID, x.SessionID2), Timestamp: x.Timestamp, ParentToolUseID: x.ParentToolUseID,
			AgentID: x.AgentID, SourceToolUseID: x.SourceToolUseID, Error: x.Error, APIErrorStatus: x.APIErrorStatus,
			IsSidechain: x.IsSidechain, IsMeta: x.IsMeta, IsSynthetic: x.IsSynthetic,
			IsCompactSummary: x.IsCompactSummary, IsAPIErrorMessage: x.IsAPIErrorMessage, Event: x.Event}
		if m := x.Message; m != nil {
			l.HasMessage = true
			l.Message = wireMessage{ID: m.ID, Model: m.Model, Role: m.Role}
			if m.Usage != nil {
				l.Message.Usage, l.Message.HasUsage = *m.Usage, true
			}
			switch {
			case len(m.Content) > 0 && m.Content[0] == '"':
				l.Message.IsString = true
				if err := unmarshal(m.Content, &l.Message.ContentString); err != nil {
					return err
				}
			case len(m.Content) > 0 && m.Content[0] == '[':
				var parts []R
				if err := unmarshal(m.Content, &parts); err != nil {
					return err
				}
				for _, raw := range parts {
					p, err := stdDecodePart(unmarshal, raw)
					if err != nil {
						return err
					}
					l.Message.Content = append(l.Message.Content, p)
				}
			}
		}
		tur := x.ToolUseResult
		if len(tur) == 0 {
			tur = x.ToolUseResult2
		}
		if len(tur) > 0 && tur[0] == '{' {
			var r stdToolUseResult[R]
			if err := unmarshal(tur, &r); err != nil {
				return err
			}
			l.ToolUseResult = toolUseResult{AgentID: r.AgentID, Status: r.Status, IsAsync: r.IsAsync,
				TotalDurationMs: int64(r.TotalDurationMs), DurationMs: int64(r.DurationMs), CommandName: r.CommandName}
			if len(r.Content) > 0 && r.Content[0] == '[' {
				l.ToolUseResult.ContentRaw = r.Content
			}
		}
		return nil
	}
}

func stdDecodePart[R ~[]byte](unmarshal func([]byte, any) error, raw R) (wirePart, error) {
	var x stdPart[R]
	if err := unmarshal(raw, &x); err != nil {
		return wirePart{}, err
	}
	p := wirePart{Type: x.Type, Text: orElse(x.Text, x.Thinking), ID: x.ID, Name: x.Name, Input: x.Input,
		ToolUseID: x.ToolUseID, IsError: x.IsError, Raw: raw}
	if x.Source != nil {
		p.MediaType = x.Source.MediaType
	}
	if len(x.Input) > 0 && x.Input[0] == '{' {
		var ti stdToolInput
		if err := unmarshal(x.Input, &ti); err != nil {
			return wirePart{}, err
		}
		p.Tool = toolInput{prompt: ti.Prompt, subagentType: ti.SubagentType, description: ti.Description,
			skill: orElse(ti.Skill, ti.Command)}
	}
	switch {
	case len(x.Content) > 0 && x.Content[0] == '"':
		if err := unmarshal(x.Content, &p.Output); err != nil {
			return wirePart{}, err
		}
	case len(x.Content) > 0 && x.Content[0] == '[':
		var parts []stdContentPart
		if err := unmarshal(x.Content, &parts); err != nil {
			return wirePart{}, err
		}
		var texts []string
		for _, c := range parts {
			switch c.Type {
			case "text":
				texts = append(texts, c.Text)
			case "image":
				mt := ""
				if c.Source != nil {
					mt = c.Source.MediaType
				}
				texts = append(texts, imageNote(mt))
			}
		}
		for i, t := range texts {
			if i > 0 {
				p.Output += "\n"
			}
			p.Output += t
		}
	}
	return p, nil
}

// blocksOnlySink reduces a conversion as agentd convert --blocks does.
type blocksOnlySink struct{ r *conversation.Reducer }

func (s *blocksOnlySink) Emit(e conversation.Event) error {
	switch e.Type {
	case conversation.TypeBlockUpsert, conversation.TypeBlockDelta,
		conversation.TypeSubagentSpawned, conversation.TypeSubagentCompleted:
		_ = s.r.Apply(e)
	}
	return nil
}
func (s *blocksOnlySink) Warn(string, int, error) {}
func (s *blocksOnlySink) EmitBlock(ctx conversation.Context, b *conversation.Block) error {
	blk := *b
	blk.Input = bytes.Clone(b.Input)
	return s.r.ApplyBlock(ctx.ConversationID, blk)
}
func (s *blocksOnlySink) EmitDelta(ctx conversation.Context, id, text string) error {
	return s.r.ApplyDelta(ctx.ConversationID, id, text)
}

// convertToBlocks converts file to blocks with decode and writes them to w
// as agentd convert --blocks does.
func convertToBlocks(file string, decode lineDecoder, w io.Writer) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	s := &blocksOnlySink{r: conversation.NewReducer()}
	if err := convertTranscripts([]Input{{Name: file, R: f}}, s, decode); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	for conv, b := range s.r.Blocks() {
		buf := append(bw.AvailableBuffer(), `{"conversationId":`...)
		buf = appendString(buf, conv)
		buf = append(buf, `,"block":`...)
		buf = appendBlock(buf, &b)
		bw.Write(append(buf, "}\n"...))
	}
	return bw.Flush()
}

// BenchmarkDecoders: the generated transcript (AGENTD_BENCH_CONVERT_MB,
// default 50) to blocks with each line decoder, everything else equal:
//
//	go test ./internal/agent/claudecode -run '^$' -bench Decoders -cpu 1 -count 5
//	GOEXPERIMENT=jsonv2 go test ./internal/agent/claudecode -run '^$' -bench Decoders -cpu 1 -count 5
func BenchmarkDecoders(b *testing.B) {
	in, size := synth.BenchClaudeTranscript(b)
	want := ""
	for _, name := range []string{"scanner", "encoding-json", "json-v2"} {
		decode, ok := lineDecoders[name]
		if !ok {
			continue
		}
		// The same blocks with every decoder, or the comparison means nothing.
		h := sha256.New()
		if err := convertToBlocks(in, decode, h); err != nil {
			b.Fatal(err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); want == "" {
			want = got
		} else if got != want {
			b.Fatalf("%s: blocks differ from the scanner's", name)
		}
		b.Run(fmt.Sprintf("decode=%s", name), func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				if err := convertToBlocks(in, decode, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report(b, int(size))
		})
	}
}
