package claudeconv

import "strings"

// Subagent identity. A subagent's conversation id is the tool_use id of the
// Task (or Agent) call that spawned it, as the contract says. Claude Code
// names the same subagent in other ways too: agentId in the Task result and
// in subagent transcript lines, task_id in task_* system lines, the
// agent-<id>.jsonl file name. subagentIndex is the one place those are
// mapped to each other; both converters use it and nothing else decides a
// subagent's conversation id.

// subagentTools are the tool names that spawn a subagent ("Agent" is the
// newer name of "Task").
func isSubagentTool(name string) bool { return name == "Task" || name == "Agent" }

type subagent struct {
	toolUseID    string
	agentID      string // normalised
	prompt       string
	subagentType string
	description  string
	parentConv   string // conversation the Task call was made in
	async        bool   // launched in the background; completes by notification
	done         bool
	claimed      bool // an inline sidechain was matched to it
}

// subagentIndex maps tool_use ids and agent ids to subagents. Not safe for
// concurrent use (each converter owns one).
type subagentIndex struct {
	byTool  map[string]*subagent
	byAgent map[string]*subagent
	order   []*subagent // spawn order, for deterministic prompt matching
}

// normalizeAgentID reduces every spelling of a Claude Code agent id to the
// bare id: "agent-a9b844f.jsonl", "agent-a9b844f" and "a9b844f" are one agent.
func normalizeAgentID(id string) string {
	id = strings.TrimSpace(id)
	id = strings.TrimSuffix(id, ".jsonl")
	return strings.TrimPrefix(id, "agent-")
}

// spawn records a subagent started by tool_use toolUseID. It reports false
// when the tool_use id was already known (the same call seen twice).
func (x *subagentIndex) spawn(toolUseID, parentConv, prompt, subagentType, description string) (*subagent, bool) {
	if sa, ok := x.byTool[toolUseID]; ok {
		return sa, false
	}
	if x.byTool == nil {
		x.byTool = make(map[string]*subagent)
	}
	sa := &subagent{toolUseID: toolUseID, parentConv: parentConv, prompt: prompt,
		subagentType: subagentType, description: description}
	x.byTool[toolUseID] = sa
	x.order = append(x.order, sa)
	return sa, true
}

// tool returns the subagent spawned by toolUseID, or nil.
func (x *subagentIndex) tool(toolUseID string) *subagent { return x.byTool[toolUseID] }

// agent returns the subagent with the given agent id (any spelling), or nil.
func (x *subagentIndex) agent(agentID string) *subagent {
	if agentID == "" {
		return nil
	}
	return x.byAgent[normalizeAgentID(agentID)]
}

// bind records that agentID is the subagent spawned by toolUseID. An agent
// id already bound to another tool_use keeps its first binding.
func (x *subagentIndex) bind(toolUseID, agentID string) {
	agentID = normalizeAgentID(agentID)
	sa := x.byTool[toolUseID]
	if sa == nil || agentID == "" {
		return
	}
	if _, taken := x.byAgent[agentID]; taken {
		return
	}
	if x.byAgent == nil {
		x.byAgent = make(map[string]*subagent)
	}
	if sa.agentID == "" {
		sa.agentID = agentID
	}
	x.byAgent[agentID] = sa
}

// claimPrompt returns the first subagent, in spawn order, whose prompt is
// prompt and that no sidechain has claimed yet, and marks it claimed.
func (x *subagentIndex) claimPrompt(prompt string) *subagent {
	if prompt == "" {
		return nil
	}
	for _, exact := range []bool{true, false} {
		for _, sa := range x.order {
			if sa.claimed {
				continue
			}
			if sa.prompt == prompt || (!exact && strings.TrimSpace(sa.prompt) == strings.TrimSpace(prompt)) {
				sa.claimed = true
				return sa
			}
		}
	}
	return nil
}

// conversationID is the conversation a subagent's lines belong to: the
// spawning tool_use id when it is known (directly, or through the agent id);
// otherwise "agent-<agentId>", or "sidechain-<key>" for a sidechain nothing
// identifies (both only happen for transcripts whose main file is missing or
// does not show the spawn).
func (x *subagentIndex) conversationID(toolUseID, agentID, key string) string {
	if toolUseID != "" {
		return toolUseID
	}
	if sa := x.agent(agentID); sa != nil {
		return sa.toolUseID
	}
	if id := normalizeAgentID(agentID); id != "" {
		return "agent-" + id
	}
	return "sidechain-" + key
}

// agentIDFromText finds the "agentId: <id>" trailer Claude Code appends to a
// Task result's text (used when the structured result is missing).
func agentIDFromText(s string) string {
	i := strings.LastIndex(s, "agentId: ")
	if i < 0 {
		return ""
	}
	rest := s[i+len("agentId: "):]
	end := strings.IndexAny(rest, " \n\t(")
	if end >= 0 {
		rest = rest[:end]
	}
	return normalizeAgentID(rest)
}

// stripAgentTrailer removes what Claude Code appends to a Task result's
// text after the answer: from the last line starting "agentId: " to the end
// (older CLIs: "agentId: x (for resuming …)"; newer ones add a <usage>
// block after it).
func stripAgentTrailer(s string) string {
	for i := len(s); i > 0; {
		i = strings.LastIndex(s[:i], "agentId: ")
		if i < 0 {
			break
		}
		if i == 0 || s[i-1] == '\n' {
			if out := strings.TrimRight(s[:i], "\n"); out != "" {
				return out
			}
			break
		}
	}
	return s
}
