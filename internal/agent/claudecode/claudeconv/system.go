package claudeconv

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentd/agentd/conversation"
)

// systemLine is a `system` line, stream-json or transcript (both spellings).
// System lines are rare and small, so encoding/json decodes them.
type systemLine struct {
	Subtype           string          `json:"subtype"`
	SessionID         string          `json:"session_id"`
	Model             string          `json:"model"`
	ClaudeCodeVersion string          `json:"claude_code_version"`
	Tools             []string        `json:"tools"`
	Cwd               string          `json:"cwd"`
	PermissionMode    string          `json:"permissionMode"`
	Status            *string         `json:"status"`
	Level             string          `json:"level"`
	Content           json.RawMessage `json:"content"`

	// hooks
	HookName  string          `json:"hook_name"`
	HookEvent string          `json:"hook_event"`
	ExitCode  *int            `json:"exit_code"`
	Outcome   string          `json:"outcome"`
	Stderr    string          `json:"stderr"`
	Error     json.RawMessage `json:"error"`

	// api_retry (stream) and api_error (transcript)
	Attempt      int     `json:"attempt"`
	MaxRetries   int     `json:"max_retries"`
	RetryDelayMs float64 `json:"retry_delay_ms"`
	ErrorStatus  int     `json:"error_status"`
	RetryAttempt int     `json:"retryAttempt"`
	MaxRetries2  int     `json:"maxRetries"`
	RetryInMs    float64 `json:"retryInMs"`

	// compact_boundary
	CompactMetadata  *compactMetadata `json:"compact_metadata"`
	CompactMetadata2 *compactMetadata `json:"compactMetadata"`

	// task_started, task_progress, task_notification
	TaskID       string `json:"task_id"`
	ToolUseID    string `json:"tool_use_id"`
	Description  string `json:"description"`
	TaskType     string `json:"task_type"`
	SubagentType string `json:"subagent_type"`
	TaskStatus   string `json:"-"`
	Summary      string `json:"summary"`
	Usage        *struct {
		DurationMs float64 `json:"duration_ms"`
	} `json:"usage"`

	DurationMs float64 `json:"durationMs"`
}

type compactMetadata struct {
	Trigger    string `json:"trigger"`
	PreTokens  int64  `json:"pre_tokens"`
	PreTokens2 int64  `json:"preTokens"`
}

// contentString is the line's content when it is a string.
func (s *systemLine) contentString() string {
	var str string
	if len(s.Content) > 0 && json.Unmarshal(s.Content, &str) == nil {
		return str
	}
	return ""
}

func logLevel(level string, def conversation.LogLevel) conversation.LogLevel {
	switch level {
	case "debug":
		return conversation.LevelDebug
	case "info", "suggestion":
		return conversation.LevelInfo
	case "warn", "warning":
		return conversation.LevelWarn
	case "error":
		return conversation.LevelError
	}
	return def
}

func (c *core) system(l *wireLine, raw []byte, lc lineCtx) {
	var s systemLine
	if err := unmarshalLenient(raw, &s); err != nil {
		c.log(lc, conversation.LevelWarn, "unreadable system line: "+err.Error(), raw)
		return
	}
	if s.Status != nil && s.Subtype == "task_notification" {
		s.TaskStatus = *s.Status
	}
	switch s.Subtype {
	case "init":
		c.initModel = s.Model
		data, _ := json.Marshal(initData{SessionID: s.SessionID, Model: s.Model, Version: s.ClaudeCodeVersion,
			Tools: s.Tools, Cwd: s.Cwd, PermissionMode: s.PermissionMode})
		msg := "Claude Code " + s.ClaudeCodeVersion + " started"
		if s.ClaudeCodeVersion == "" {
			msg = "Claude Code started"
		}
		if s.Model != "" {
			msg += " with model " + s.Model
		}
		c.log(lc, conversation.LevelInfo, msg, data)
	case "status":
		msg, level := "status cleared", conversation.LevelInfo
		if s.Status != nil && *s.Status != "" {
			msg = "status: " + *s.Status
			if *s.Status == "requesting" { // sent before every model request
				level = conversation.LevelDebug
			}
		}
		c.log(lc, level, msg, nil)
	case "compact_boundary":
		msg := "conversation compacted"
		cm := s.CompactMetadata
		if cm == nil {
			cm = s.CompactMetadata2
		}
		if cm != nil {
			pre := max(cm.PreTokens, cm.PreTokens2)
			msg = fmt.Sprintf("conversation compacted (%s, %d tokens before)", orElse(cm.Trigger, "auto"), pre)
		}
		b := conversation.Block{ID: blockID(c.lineKey(l), 0), Type: conversation.BlockSystem,
			Timestamp: lc.ts, Status: conversation.StatusComplete, Subtype: "compact_boundary", Message: msg}
		c.upsert(&b, lc)
	case "local_command":
		b := conversation.Block{ID: blockID(c.lineKey(l), 0), Type: conversation.BlockSystem,
			Timestamp: lc.ts, Status: conversation.StatusComplete, Subtype: "local_command", Message: s.contentString()}
		c.upsert(&b, lc)
	case "hook_started", "hook_progress", "hook_response":
		level := conversation.LevelDebug
		msg := fmt.Sprintf("hook %s %s", orElse(s.HookName, s.HookEvent), strings.TrimPrefix(s.Subtype, "hook_"))
		if (s.ExitCode != nil && *s.ExitCode != 0) || s.Outcome == "error" {
			level = conversation.LevelWarn
			msg += " failed"
			if s.Stderr != "" {
				msg += ": " + s.Stderr
			}
		}
		c.log(lc, level, msg, nil)
	case "api_retry", "api_error":
		c.log(lc, conversation.LevelWarn, retryMessage(&s), nil)
	case "task_started":
		if sa := c.subs.tool(s.ToolUseID); sa != nil {
			c.subs.bind(sa.toolUseID, s.TaskID)
			c.log(lineCtx{conv: sa.parentConv, ts: lc.ts}, conversation.LevelInfo, "subagent "+sa.toolUseID+" started", nil)
			return
		}
		c.log(lc, conversation.LevelInfo, "task started: "+orElse(s.Description, s.TaskID), nil)
	case "thinking_tokens":
		// A running estimate, several per second while the model thinks.
	case "task_updated":
		c.log(lc, conversation.LevelDebug, "task "+s.TaskID+" updated", nil)
	case "task_progress":
		c.log(lc, conversation.LevelDebug, "task progress: "+orElse(s.Description, s.TaskID), nil)
	case "task_notification":
		sa := c.subs.tool(s.ToolUseID)
		if sa == nil {
			sa = c.subs.agent(s.TaskID)
		}
		if sa != nil && sa.async && !sa.done {
			var dur int64
			if s.Usage != nil {
				dur = int64(s.Usage.DurationMs)
			}
			c.completeSubagent(sa, s.TaskStatus != "completed", s.Summary, dur, lineCtx{conv: sa.parentConv, ts: lc.ts})
			return
		}
		level := conversation.LevelInfo
		if sa != nil {
			level = conversation.LevelDebug // the Task result reports the subagent's end
		}
		c.log(lc, level, "task "+orElse(s.TaskStatus, "finished")+": "+orElse(s.Summary, s.TaskID), nil)
	case "turn_duration", "stop_hook_summary", "informational", "away_summary", "files_persisted":
		msg := s.Subtype
		if str := s.contentString(); str != "" {
			msg += ": " + str
		} else if s.DurationMs > 0 {
			msg += ": " + strconv.FormatFloat(s.DurationMs, 'f', -1, 64) + " ms"
		}
		c.log(lc, logLevel(s.Level, conversation.LevelDebug), msg, nil)
	default:
		c.log(lc, logLevel(s.Level, conversation.LevelInfo), "system message "+strconv.Quote(s.Subtype), raw)
	}
}

func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// retryMessage names the cause of a failed API request Claude Code retries.
func retryMessage(s *systemLine) string {
	attempt, maxRetries, delay := s.Attempt, s.MaxRetries, s.RetryDelayMs
	if attempt == 0 {
		attempt, maxRetries, delay = s.RetryAttempt, s.MaxRetries2, s.RetryInMs
	}
	cause := ""
	status := s.ErrorStatus
	if len(s.Error) > 0 {
		var str string
		var obj struct {
			Status  int    `json:"status"`
			Message string `json:"message"`
			Error   *struct {
				Message string `json:"message"`
				Type    string `json:"type"`
			} `json:"error"`
		}
		switch {
		case json.Unmarshal(s.Error, &str) == nil:
			cause = str
		case json.Unmarshal(s.Error, &obj) == nil:
			cause = obj.Message
			if cause == "" && obj.Error != nil {
				cause = orElse(obj.Error.Message, obj.Error.Type)
			}
			if status == 0 {
				status = obj.Status
			}
		}
	}
	msg := "API request failed"
	if cause != "" {
		msg += ": " + cause
	}
	if status != 0 {
		msg += " (HTTP " + strconv.Itoa(status) + ")"
	}
	if attempt > 0 {
		msg += "; retry " + strconv.Itoa(attempt)
		if maxRetries > 0 {
			msg += "/" + strconv.Itoa(maxRetries)
		}
		if delay > 0 {
			msg += " in " + strconv.FormatInt(int64(delay), 10) + " ms"
		}
	}
	return msg
}

// initData is the Data of the init log event.
type initData struct {
	SessionID      string   `json:"sessionId,omitempty"`
	Model          string   `json:"model,omitempty"`
	Version        string   `json:"version,omitempty"`
	Tools          []string `json:"tools,omitempty"`
	Cwd            string   `json:"cwd,omitempty"`
	PermissionMode string   `json:"permissionMode,omitempty"`
}

// Init is what the system/init line says about the Claude Code process.
type Init struct {
	SessionID string
	Model     string
	// Version is claude_code_version.
	Version        string
	Tools          []string
	Cwd            string
	PermissionMode string
}

// ParseInit reads a system/init stream-json line; ok is false for any other
// line. The live runner uses it to record the CLI version and session id.
func ParseInit(line []byte) (Init, bool) {
	var s struct {
		Type string `json:"type"`
		systemLine
	}
	if err := unmarshalLenient(line, &s); err != nil || s.Type != "system" || s.Subtype != "init" {
		return Init{}, false
	}
	return Init{SessionID: s.SessionID, Model: s.Model, Version: s.ClaudeCodeVersion, Tools: s.Tools,
		Cwd: s.Cwd, PermissionMode: s.PermissionMode}, true
}
