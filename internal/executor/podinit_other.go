//go:build !linux

package executor

import (
	"errors"
	"fmt"
)

// networkOff fails: pod-init runs in a Kubernetes pod, on Linux.
func networkOff() error {
	return fmt.Errorf("take the network down: pod-init needs Linux: %w", errors.ErrUnsupported)
}
