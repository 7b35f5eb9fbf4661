package executor

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// PodInit runs `agentd executor pod-init`: the init container of a
// Kubernetes sandbox pod, which prepares what the executor's container
// (unprivileged, read-only root) cannot do itself, then exits:
//
//   - --network-off takes down every network interface of the pod's
//     network namespace but loopback (needs CAP_NET_ADMIN): the agents
//     then reach nothing over the network; the server still reaches the
//     executor, through the API server's port-forward, which the node's
//     runtime dials inside the namespace on loopback.
//   - --etc DIR writes DIR/passwd and DIR/group: the image's, plus an
//     entry for --uid/--gid (named --name, home --home), mounted over
//     /etc/passwd and /etc/group in the executor's container, so programs
//     that look their user up (git, ssh, whoami) find one.
func PodInit(args []string) error {
	fl := flag.NewFlagSet("executor pod-init", flag.ContinueOnError)
	var (
		netOff = fl.Bool("network-off", false, "take down every network interface but loopback")
		etc    = fl.String("etc", "", "write passwd and group for --uid/--gid into this folder")
		uid    = fl.Int("uid", -1, "with --etc: the sandbox's uid")
		gid    = fl.Int("gid", -1, "with --etc: its gid (default: the uid)")
		name   = fl.String("name", "agent", "with --etc: its user name")
		home   = fl.String("home", "/workspace", "with --etc: its home folder")
	)
	if err := fl.Parse(args); err != nil {
		return fmt.Errorf("pod-init: %w", err)
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("pod-init: unexpected arguments %q", fl.Args())
	}
	if *netOff {
		if err := networkOff(); err != nil {
			return fmt.Errorf("pod-init: %w", err)
		}
	}
	if *etc != "" {
		if *uid <= 0 {
			return errors.New("pod-init: --etc needs a --uid other than root")
		}
		if *gid < 0 {
			*gid = *uid
		}
		if err := writeEtc(*etc, "/etc", *uid, *gid, *name, *home); err != nil {
			return fmt.Errorf("pod-init: %w", err)
		}
	}
	return nil
}

// writeEtc writes dir/passwd and dir/group: those of src without entries
// of that uid, gid or name, plus the sandbox's.
func writeEtc(dir, src string, uid, gid int, name, home string) error {
	if strings.ContainsAny(name, ":\n") || strings.ContainsAny(home, ":\n") || name == "" {
		return fmt.Errorf("bad user name or home %q %q", name, home)
	}
	passwd := fmt.Sprintf("%s:x:%d:%d:agentd sandbox:%s:/bin/sh\n", name, uid, gid, home)
	if _, err := os.Stat("/bin/bash"); err == nil {
		passwd = strings.Replace(passwd, ":/bin/sh\n", ":/bin/bash\n", 1)
	}
	group := fmt.Sprintf("%s:x:%d:\n", name, gid)
	for _, f := range []struct {
		file, entry string
		id          int
	}{{"passwd", passwd, uid}, {"group", group, gid}} {
		old, err := os.ReadFile(filepath.Join(src, f.file))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		var out bytes.Buffer
		sc := bufio.NewScanner(bytes.NewReader(old))
		for sc.Scan() {
			line := sc.Text()
			fs := strings.Split(line, ":")
			if len(fs) >= 3 && (fs[0] == name || fs[2] == strconv.Itoa(f.id)) {
				continue
			}
			out.WriteString(line)
			out.WriteByte('\n')
		}
		out.WriteString(f.entry)
		if err := os.WriteFile(filepath.Join(dir, f.file), out.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}
