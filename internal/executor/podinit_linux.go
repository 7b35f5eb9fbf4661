package executor

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// networkOff sets every interface but loopback down and checks none is
// left up.
func networkOff() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	for _, it := range ifs {
		if it.Flags&net.FlagLoopback != 0 || it.Flags&net.FlagUp == 0 {
			continue
		}
		ifr, err := unix.NewIfreq(it.Name)
		if err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
			return fmt.Errorf("flags of %s: %w", it.Name, err)
		}
		ifr.SetUint16(ifr.Uint16() &^ unix.IFF_UP)
		if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
			return fmt.Errorf("take %s down: %w (the init container needs CAP_NET_ADMIN)", it.Name, err)
		}
	}
	ifs, err = net.Interfaces()
	if err != nil {
		return err
	}
	for _, it := range ifs {
		if it.Flags&net.FlagLoopback == 0 && it.Flags&net.FlagUp != 0 {
			return fmt.Errorf("interface %s is still up", it.Name)
		}
	}
	return nil
}
