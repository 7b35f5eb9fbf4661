// Package chaos holds agentd's chaos test (chaos_test.go): a real `agentd
// serve --sandbox executor` child process, shell sessions running paced
// commands, WebSocket and SSE clients (followers, slow consumers, reconnect
// storms from random cursors), and faults injected at random points of
// random turns: kill -9 of the server (restarted on the same data and
// port, re-attaching its executors) and of executors, SQLite write locks
// held by another connection, and a full disk (a small tmpfs mounted as the
// data folder). After every round it checks that each session's events are
// contiguous, nothing was stored or delivered twice, what every client
// received equals the store, no process, cgroup, mount, file descriptor or
// goroutine leaked, and the server still serves.
//
// It is bounded (AGENTD_CHAOS_ROUNDS, AGENTD_CHAOS_DURATION), uses loopback
// only and stops by itself; a failure prints the seed that replays the same
// schedule (AGENTD_CHAOS_SEED). See docs/chaos.md. It needs Linux (the
// executor sandbox, cgroups, tmpfs mounts): its tests build only there.
package chaos
