package executor

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// --network-off (root here, as the pod's init container is): in a network
// namespace of its own with a veth pair up, every interface but loopback
// is down afterwards. The test binary re-runs itself in that namespace.
func TestNetworkOff(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command (iproute2)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "EXECUTOR_TEST_NETOFF=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "netoff: ok") {
		t.Fatalf("network-off in a namespace of its own: %v\n%s", err, out)
	}
}
