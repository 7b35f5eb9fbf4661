package sandbox

import (
	"context"
	"encoding/json"
)

// Collector is implemented by providers whose environments are resources
// outside the server's process tree (containers): Collect removes every
// environment of this provider that the server no longer records — keep
// are the handles (HandleReporter.Handle) the store still holds — such as those
// of sessions deleted while the server was down. The server calls it once
// at start, after loading its sessions and before serving requests.
type Collector interface {
	Collect(ctx context.Context, keep []json.RawMessage) error
}

// Closer is implemented by providers holding resources of their own, such
// as environments started ahead: Close releases them at shutdown, after
// the sessions closed. Environments handed out are not affected.
type Closer interface {
	Close(ctx context.Context) error
}

// Describer is implemented by providers that say what they protect
// against (GET /api/sandboxes; docs/security.md's table as data).
type Describer interface {
	Describe() Info
}

// Info describes a backend as configured.
type Info struct {
	// Protections answer, per threat, whether an agent is kept from it.
	Protections []Protection
	// Limits are each environment's default limits (zero: none), and
	// LimitsEnforcement how they are enforced ("cgroup v1 (…)", "docker
	// (cgroups)", "none (…)").
	Limits            Limits
	LimitsEnforcement string
	// SurvivesRestart: environments keep running across a server restart
	// and are re-attached (Recoverer).
	SurvivesRestart bool
	// Pools are the backend's warm pools, if it keeps any.
	Pools []PoolInfo
}

// Threat names something an agent might try; the rows of docs/security.md.
type Threat string

const (
	ThreatOtherWorkspaces   Threat = "otherWorkspaces"   // read another session's workspace
	ThreatHostFiles         Threat = "hostFiles"         // read the database, the data folder, the host's files
	ThreatServerEnvironment Threat = "serverEnvironment" // read the server's environment (/proc/<pid>/environ)
	ThreatWriteOutside      Threat = "writeOutside"      // write outside its workspace
	ThreatServerPort        Threat = "serverPort"        // reach the server's HTTP port
	ThreatNetwork           Threat = "network"           // reach anything else on the network
	ThreatProviderKey       Threat = "providerKey"       // find the real provider key
	ThreatExhaustion        Threat = "exhaustion"        // exhaust processes, memory, CPU
	ThreatLeftovers         Threat = "leftovers"         // leave a process (or container) behind after the session
	ThreatSignal            Threat = "signal"            // signal or trace the server or other sessions
	ThreatHostUsers         Threat = "hostUsers"         // leave a file (a set-uid shell…) other local users of the host reach
	ThreatHostRoot          Threat = "hostRoot"          // make a file of the host's root (a set-uid-root shell)
	ThreatServerReads       Threat = "serverReads"       // have the server read a FIFO, device or huge file for it
)

// Threats lists every Threat in the order of docs/security.md's table.
var Threats = []Threat{
	ThreatOtherWorkspaces, ThreatHostFiles, ThreatServerEnvironment, ThreatWriteOutside, ThreatServerPort,
	ThreatNetwork, ThreatProviderKey, ThreatExhaustion, ThreatLeftovers, ThreatSignal,
	ThreatHostUsers, ThreatHostRoot, ThreatServerReads,
}

// Protection says whether a backend keeps an agent from a threat, and how
// (or why not).
type Protection struct {
	Threat    Threat
	Protected bool
	Detail    string
}

// PoolInfo is the state of one warm pool: environments of one kind
// (image and limits) started ahead and claimed by new sessions.
type PoolInfo struct {
	Key      string
	Image    string
	Limits   Limits
	Profiles []string // the profiles whose sessions claimed from it
	// Size is the target, Ready how many wait, Starting whether one is
	// being started.
	Size     int
	Ready    int
	Starting bool
	// Claims counts environments handed out, Misses creates that found
	// none ready, Failures failed starts.
	Claims, Misses, Failures int64
	LastError                string
	LastStartMS              int64
}

// FreshWorkspacer is implemented by environments whose workspace is not a
// folder of this host (a pod's volume): FreshWorkspace reports whether it
// is new, to be filled with the session's saved files (or the profile's
// defaults), whatever the host's folder says.
type FreshWorkspacer interface {
	FreshWorkspace() bool
}

// RemoteWorkspacer is implemented by providers whose workspaces are not
// folders of this host: the files of a session whose environment is down
// are then served from the store's copies.
type RemoteWorkspacer interface {
	RemoteWorkspaces() bool
}

// WorkspaceCollector is implemented by providers that keep a session's
// workspace outside this host beyond its environments (a volume claim):
// RemoveWorkspace deletes a session's when the session is purged, and
// CollectWorkspaces, at start, those of sessions not in sessions (the
// ids of every session the store holds).
type WorkspaceCollector interface {
	RemoveWorkspace(ctx context.Context, sessionID string) error
	CollectWorkspaces(ctx context.Context, sessions []string) error
}
