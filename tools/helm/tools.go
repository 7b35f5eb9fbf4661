//go:build tools

// Package tools records the Helm CLI as this module's dependency.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
