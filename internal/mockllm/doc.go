// Package mockllm is a scripted model server: it speaks the Anthropic
// Messages API, the OpenAI Responses and Chat Completions APIs and the
// Gemini generateContent API well enough for the real agent CLIs (Claude
// Code, Codex, Gemini CLI, OpenCode) to run against it offline, and
// answers each request from a Script of rules, so runs are deterministic.
//
// Ids (msg_…, toolu_…, call_…) derive from a seed and per-kind call
// counters, never from randomness. Every request is recorded in a log
// tests can read (Server.Requests, or GET /_mockllm/requests when the
// server runs as a separate process). docs/mock-llm.md describes the
// script format and how to point each CLI at the server.
package mockllm
