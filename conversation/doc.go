// Package conversation holds agentd's public conversation model: the event
// envelope every transport carries, the typed event payloads, the block types
// a conversation is made of, and the one reducer that turns an event log into
// conversation state.
//
// The server uses the reducer for GET /api/sessions/{id}; the Go client and
// the tests use the same code, and the TypeScript client mirrors its rules, so
// every reader of a log sees the same blocks.
package conversation
