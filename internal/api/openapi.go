package api

import (
	"encoding/json"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/restapi"
)

// openAPI builds the OpenAPI 3.1 document from the route table and the Go
// types of bodies and events (schemas by reflection), so it cannot miss a
// route or drift from a type.
func (s *Server) openAPI() map[string]any {
	g := &schemaGen{defs: map[string]any{}}
	paths := map[string]map[string]any{}
	for _, rt := range s.routes {
		p := strings.ReplaceAll(rt.pattern, "...}", "}")
		op := map[string]any{
			"summary":     rt.summary,
			"operationId": operationID(rt),
		}
		if rt.legacy {
			op["deprecated"] = true
			op["tags"] = []string{"legacy"}
		}
		if !rt.auth {
			op["security"] = []any{}
		}
		var params []any
		for _, pm := range rt.params {
			params = append(params, map[string]any{
				"name": pm.name, "in": pm.in, "required": pm.required, "description": pm.desc,
				"schema": map[string]any{"type": pm.typ},
			})
		}
		if rt.kind == "sse" {
			params = append(params, map[string]any{"name": "Last-Event-ID", "in": "header", "required": false,
				"description": "SSE resume cursor (overrides after)", "schema": map[string]any{"type": "integer"}})
		}
		if params != nil {
			op["parameters"] = params
		}
		if rt.req != nil {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": g.ref(reflect.TypeOf(rt.req))}}}
		}
		if rt.rawBody {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/octet-stream": map[string]any{"schema": map[string]any{"type": "string", "format": "binary"}}}}
		}
		responses := map[string]any{}
		ok := map[string]any{"description": "success"}
		switch {
		case rt.kind == "ws":
			ok["description"] = "Switching protocols to WebSocket (see docs/api.md for the frames)"
		case rt.kind == "raw":
			ok["content"] = map[string]any{"*/*": map[string]any{}}
		case rt.resp != nil:
			content := map[string]any{"application/json": map[string]any{"schema": g.ref(reflect.TypeOf(rt.resp))}}
			if rt.kind == "sse" {
				content["text/event-stream"] = map[string]any{"schema": map[string]any{
					"type": "string", "description": "SSE: id = seq, event = type, data = the Event envelope"}}
			}
			ok["content"] = content
		}
		responses[itoa(rt.status)] = ok
		responses["default"] = map[string]any{"description": "error", "content": map[string]any{
			"application/json": map[string]any{"schema": g.ref(reflect.TypeOf(apiError{}))}}}
		op["responses"] = responses
		if paths[p] == nil {
			paths[p] = map[string]any{}
		}
		paths[p][strings.ToLower(rt.method)] = op
	}
	// Event payloads and the state types clients reduce into.
	for _, t := range []any{
		conversation.Event{}, conversation.Block{}, conversation.State{},
		conversation.BlockUpsert{}, conversation.BlockDelta{}, conversation.MetadataUpdate{},
		conversation.StatusChange{}, conversation.QueryStarted{}, conversation.QueryCompleted{},
		conversation.QueryFailed{}, conversation.PermissionRequested{}, conversation.PermissionResolved{},
		conversation.FileChange{}, conversation.SubagentSpawned{}, conversation.SubagentCompleted{},
		conversation.ErrorEvent{}, conversation.LogEvent{}, conversation.SessionIdleEvent{},
		conversation.MessageQueued{}, conversation.MessageDequeued{}, conversation.MessageCancelled{},
		conversation.OptionsUpdate{},
		ackFrame{}, errorFrame{}, clientFrame{}, sessionFrame{},
	} {
		g.ref(reflect.TypeOf(t))
	}
	g.enums()
	g.messageContent()
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "agentd", "version": APIVersion,
			"description": "Runs AI coding agents in sandboxes and serves them over HTTP, SSE, WebSocket and Socket.IO. See docs/api.md."},
		"servers":    []any{map[string]any{"url": "/"}},
		"paths":      paths,
		"security":   []any{map[string]any{"bearer": []string{}}},
		"components": map[string]any{"schemas": g.defs, "securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}}},
	}
}

func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.OpenAPI())
}

// APIVersion is the version of the HTTP API described by the OpenAPI
// document (not the binary's version, which /health reports).
const APIVersion = "1.0.0"

// OpenAPI returns the OpenAPI 3.1 document as indented JSON.
func (s *Server) OpenAPI() []byte {
	s.openapiOnce.Do(func() {
		b, err := json.MarshalIndent(s.openAPI(), "", "  ")
		if err != nil {
			panic(err) // only plain data goes in
		}
		s.openapiDoc = append(b, '\n')
	})
	return s.openapiDoc
}

func operationID(rt route) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(rt.method))
	for _, part := range strings.Split(rt.pattern, "/") {
		part = strings.Trim(part, "{}.")
		if part == "" || part == "api" {
			continue
		}
		part = strings.ReplaceAll(part, "-", "")
		part = strings.ReplaceAll(part, ".", "")
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	if rt.legacy {
		b.WriteString("Legacy")
	}
	return b.String()
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// schemaGen derives JSON Schemas from Go types via their json tags.
type schemaGen struct {
	defs map[string]any
}

var (
	timeType = reflect.TypeOf(time.Time{})
	rawType  = reflect.TypeOf(json.RawMessage{})
)

func (g *schemaGen) ref(t reflect.Type) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == rawType:
		return map[string]any{}
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float64, reflect.Float32:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": g.ref(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.ref(t.Elem())}
	case reflect.Interface:
		return map[string]any{}
	case reflect.Struct:
		name := schemaName(t)
		if _, ok := g.defs[name]; !ok {
			g.defs[name] = map[string]any{} // break cycles
			g.defs[name] = g.object(t)
		}
		return map[string]any{"$ref": "#/components/schemas/" + name}
	}
	return map[string]any{}
}

func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	g.fields(t, props, &required)
	sort.Strings(required)
	o := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		o["required"] = required
	}
	return o
}

// fields adds t's JSON fields to props; those of an embedded struct
// without a JSON name are its own, as encoding/json sends them.
func (g *schemaGen) fields(t reflect.Type, props map[string]any, required *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			g.fields(f.Type, props, required)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		sch := g.ref(f.Type)
		if f.Type.Kind() == reflect.Pointer && !strings.Contains(opts, "omitempty") {
			// Sent as null when unset.
			if inner, ok := sch["type"]; ok {
				sch = map[string]any{"type": []any{inner, "null"}}
			} else {
				sch = map[string]any{"oneOf": []any{sch, map[string]any{"type": "null"}}}
			}
		}
		props[name] = sch
		// Every field without omitempty/omitzero is always sent (a nil
		// pointer as null), so it is required.
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			*required = append(*required, name)
		}
	}
}

// enums pins the closed string sets the TypeScript client types against.
func (g *schemaGen) enums() {
	set := func(schema, prop string, values any) {
		d, ok := g.defs[schema].(map[string]any)
		if !ok {
			return
		}
		props := d["properties"].(map[string]any)
		props[prop] = map[string]any{"type": "string", "enum": values}
	}
	set("Event", "type", conversation.EventTypes)
	set("Turn", "status", conversation.TurnStatuses)
	set("Block", "type", conversation.BlockTypes)
	set("Block", "status", []conversation.BlockStatus{conversation.StatusPending, conversation.StatusComplete, conversation.StatusError})
	set("StatusChange", "status", conversation.SessionStatuses)
	// A log without a status event reduces to an empty status.
	set("Runtime", "status", append([]conversation.SessionStatus{""}, conversation.SessionStatuses...))
	set("ConversationState", "status", append([]conversation.SessionStatus{""}, conversation.SessionStatuses...))
	set("Context", "source", []conversation.Source{conversation.SourceRunner, conversation.SourceServer, conversation.SourceClient})
	set("PermissionResolved", "behavior", []conversation.PermissionBehavior{conversation.Allow, conversation.Deny})
	set("PermissionResolved", "by", []conversation.ResolvedBy{conversation.ByUser, conversation.ByPolicy, conversation.ByTimeout, conversation.ByInterrupt, conversation.ByRule})
	set("PermissionResolved", "scope", []conversation.PermissionScope{conversation.ScopeOnce, conversation.ScopeSession})
	set("PermissionAnswer", "scope", []conversation.PermissionScope{conversation.ScopeOnce, conversation.ScopeSession})
	set("PermissionRule", "behavior", []conversation.PermissionBehavior{conversation.Allow, conversation.Deny})
}

// messageContent gives MessageRequest.content its two shapes: a string,
// or a list of content parts (restapi's custom JSON).
func (g *schemaGen) messageContent() {
	d, ok := g.defs["MessageRequest"].(map[string]any)
	if !ok {
		return
	}
	part := g.ref(reflect.TypeOf(restapi.ContentPart{}))
	d["properties"].(map[string]any)["content"] = map[string]any{"oneOf": []any{
		map[string]any{"type": "string"},
		map[string]any{"type": "array", "items": part},
	}}
}

func schemaName(t reflect.Type) string {
	n := t.Name()
	switch n {
	case "State":
		return "ConversationState"
	case "Summary":
		if strings.Contains(t.PkgPath(), "session") {
			return "SessionSummary"
		}
		return "ProfileSummary"
	case "Profile":
		return "AgentProfile"
	case "Subagent":
		if strings.Contains(t.PkgPath(), "profile") {
			return "ProfileSubagent"
		}
	case "File":
		return "ProfileFile"
	case "Info":
		return "ArchitectureInfo"
	case "FileInfo":
		return "WorkspaceEntry"
	case "apiError":
		return "Error"
	case "Usage":
		if strings.HasSuffix(t.PkgPath(), "/store") {
			return "BudgetUsage" // not conversation's token counts
		}
	}
	if n == "" {
		return "Anonymous"
	}
	return strings.ToUpper(n[:1]) + n[1:]
}
