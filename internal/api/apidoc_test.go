package api

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"time"

	"github.com/agentd/agentd/conversation"
)

// apiDoc renders docs/api.md's generated sections from the route table and
// the Go types of bodies, events and blocks (the ones the OpenAPI document
// is generated from).
func apiDoc() map[string]string {
	var s Server
	routes := append(s.table(), s.identityRoutes()...)
	d := &docTypes{seen: map[reflect.Type]bool{}}

	var rt strings.Builder
	rt.WriteString("| Route | What it does | Body → answer |\n|---|---|---|\n")
	for _, r := range routes {
		path := "`" + r.method + " " + strings.ReplaceAll(r.pattern, "...}", "…}") + "`"
		for _, p := range r.params {
			if p.in == "query" {
				path += " `?" + p.name + "`"
			}
		}
		what := r.summary
		if !r.auth {
			what += " (no key needed)"
		}
		var io strings.Builder
		if r.req != nil {
			io.WriteString("`" + d.name(reflect.TypeOf(r.req)) + "` ")
		}
		io.WriteString(fmt.Sprintf("→ %d", r.status))
		switch {
		case r.kind == "ws":
			io.WriteString(" WebSocket")
		case r.kind == "raw":
			io.WriteString(" bytes")
		case r.resp != nil:
			io.WriteString(" `" + d.name(reflect.TypeOf(r.resp)) + "`")
			if r.kind == "sse" {
				io.WriteString("; SSE with `Accept: text/event-stream`")
			}
		}
		fmt.Fprintf(&rt, "| %s | %s | %s |\n", path, what, io.String())
	}

	var bodies strings.Builder
	for i := 0; i < len(d.queue); i++ {
		t := d.queue[i]
		fmt.Fprintf(&bodies, "- `%s` `%s`\n", schemaName(t), d.object(t))
	}

	var events strings.Builder
	events.WriteString("| type | payload |\n|---|---|\n")
	for _, et := range conversation.EventTypes {
		p, err := conversation.Event{Type: et}.Decode()
		if err != nil {
			panic(err)
		}
		ev := &docTypes{seen: map[reflect.Type]bool{}}
		fmt.Fprintf(&events, "| `%s` | `%s` |\n", et, ev.object(reflect.TypeOf(p).Elem()))
	}

	var blocks strings.Builder
	blocks.WriteString("| type | fields it always has besides `id`, `type`, `timestamp` |\n|---|---|\n")
	for _, bt := range conversation.BlockTypes {
		fields := conversation.Required(bt)
		for i, f := range fields {
			fields[i] = "`" + f + "`"
		}
		fmt.Fprintf(&blocks, "| `%s` | %s |\n", bt, strings.Join(fields, ", "))
	}
	return map[string]string{"routes": rt.String(), "bodies": bodies.String(), "events": events.String(), "blocks": blocks.String()}
}

// docTypes renders Go types in a TypeScript-like shorthand, queueing the
// struct types it names so each is rendered once.
type docTypes struct {
	seen  map[reflect.Type]bool
	queue []reflect.Type
}

var (
	docTime = reflect.TypeOf(time.Time{})
	docRaw  = reflect.TypeOf(json.RawMessage{})
	docMode = reflect.TypeOf(fs.FileMode(0))
)

// name is t's rendering: a struct by its schema name (queued), the rest
// by kind.
func (d *docTypes) name(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == docTime:
		return "time"
	case t == docRaw:
		return "JSON"
	case t == docMode:
		return "integer"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice:
		return d.name(t.Elem()) + "[]"
	case reflect.Map:
		return "{string: " + d.name(t.Elem()) + "}"
	case reflect.Interface:
		return "JSON"
	case reflect.Struct:
		if !d.seen[t] {
			d.seen[t] = true
			d.queue = append(d.queue, t)
		}
		return schemaName(t)
	}
	return "JSON"
}

// object renders a struct's JSON fields: name?: type for one that may be
// absent, type | null for one sent as null when unset.
func (d *docTypes) object(t reflect.Type) string {
	var parts []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		typ := d.name(f.Type)
		optional := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
		if f.Type.Kind() == reflect.Pointer && !optional {
			typ += " | null"
		}
		if optional {
			name += "?"
		}
		parts = append(parts, name+": "+typ)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
