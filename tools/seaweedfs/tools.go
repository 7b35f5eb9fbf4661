//go:build tools

// Package tools records the SeaweedFS server as this module's dependency.
package tools

import _ "github.com/seaweedfs/seaweedfs/weed"
