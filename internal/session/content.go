package session

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
)

// Message is a user message: its text and what was sent with it, already
// stored in the session's artifact store. Images reach the agent with the
// text (architectures that are an agent.ImageAccepter only); files are
// written into the workspace, at their name, before the turn starts.
type Message struct {
	Content string
	Images  []conversation.ArtifactRef
	// Files have a Name: a workspace path (sandbox.CleanPath's rules).
	Files []conversation.ArtifactRef
}

// attachments are what the user_message block (and message:queued)
// carries: the images (no name), then the files (named).
func (m Message) attachments() []conversation.ArtifactRef {
	if len(m.Images)+len(m.Files) == 0 {
		return nil
	}
	out := make([]conversation.ArtifactRef, 0, len(m.Images)+len(m.Files))
	for _, r := range m.Images {
		r.Name = ""
		out = append(out, r)
	}
	return append(out, m.Files...)
}

func (m Message) command(op, actor string) command {
	return command{Op: op, Content: m.Content, Images: m.Images, Files: m.Files, Actor: actor}
}

func (c command) message() Message {
	return Message{Content: c.Content, Images: c.Images, Files: c.Files}
}

// queuedMessage is the message a queued one was: attachments without a
// name are its images.
func queuedMessage(q conversation.QueuedMessage) Message {
	m := Message{Content: q.Content}
	for _, r := range q.Attachments {
		if r.Name == "" {
			m.Images = append(m.Images, r)
		} else {
			m.Files = append(m.Files, r)
		}
	}
	return m
}

// CheckContent refuses, before anything is queued or started, a message
// the session's agent cannot take.
func (s *Session) CheckContent(msg Message) error {
	if len(msg.Images) == 0 {
		return nil
	}
	s.mu.Lock()
	name := s.rec.Architecture
	s.mu.Unlock()
	arch, ok := s.m.cfg.Architectures.Lookup(name)
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownArchitecture, name)
	}
	if ia, ok := arch.(agent.ImageAccepter); !ok || !ia.AcceptsImages() {
		return fmt.Errorf("%w: the %s agent takes no images", ErrUnsupportedContent, name)
	}
	return nil
}

// ArtifactsOrErr returns the artifact store, or ErrUnsupportedContent
// when the server keeps no artifacts.
func (m *Manager) ArtifactsOrErr() (store.ArtifactStore, error) {
	if m.cfg.Artifacts == nil {
		return nil, fmt.Errorf("%w: the server keeps no artifacts", ErrUnsupportedContent)
	}
	return m.cfg.Artifacts, nil
}

// turnContent completes a turn's input from its message, in the turn's
// job before the runner gets it: the images' bytes from the artifact
// store, and the files written into the workspace.
func (m *Manager) turnContent(ctx context.Context, env sandbox.Environment, id string, t agent.Turn, msg Message) (agent.Turn, error) {
	if len(msg.Images)+len(msg.Files) == 0 {
		return t, nil
	}
	as, err := m.ArtifactsOrErr()
	if err != nil {
		return t, err
	}
	read := func(r conversation.ArtifactRef) ([]byte, error) {
		rc, err := as.OpenArtifact(ctx, id, r.SHA256, 0, -1)
		if err != nil {
			return nil, fmt.Errorf("open artifact %s: %w", r.SHA256, err)
		}
		defer rc.Close()
		data, err := io.ReadAll(io.LimitReader(rc, r.Size+1))
		if err == nil && int64(len(data)) != r.Size {
			err = errors.New("size differs from its ref")
		}
		if err != nil {
			return nil, fmt.Errorf("read artifact %s: %w", r.SHA256, err)
		}
		return data, nil
	}
	for _, r := range msg.Images {
		data, err := read(r)
		if err != nil {
			return t, err
		}
		t.Images = append(t.Images, agent.Image{MediaType: r.ContentType, Data: data, SHA256: r.SHA256})
	}
	for _, r := range msg.Files {
		data, err := read(r)
		if err != nil {
			return t, err
		}
		p, err := sandbox.CleanPath(r.Name)
		if err != nil {
			return t, err
		}
		if err := env.WriteFile(ctx, p, data, 0o644); err != nil {
			return t, fmt.Errorf("write %s into the workspace: %w", p, err)
		}
	}
	return t, nil
}

// artifactHost is the host of a session whose store keeps artifacts: an
// agent.ArtifactPutter.
type artifactHost struct {
	*host
	as store.ArtifactStore
}

// PutArtifact stores content of the session's agent (agent.ArtifactPutter).
func (h *artifactHost) PutArtifact(ctx context.Context, meta conversation.ArtifactRef, r io.Reader) (conversation.ArtifactRef, error) {
	return h.as.PutArtifact(ctx, h.s.id, meta, r)
}
