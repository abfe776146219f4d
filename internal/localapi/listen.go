package localapi

import (
	"net"
	"os"
	"os/user"
	"strconv"
	"syscall"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// ListenSocket creates the socket (removing a stale one), mode 0660 and,
// when group is set, owned by that group.
func ListenSocket(path, group string) (net.Listener, error) {
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return nil, refusal.New(refusal.InvalidState, "another agent already serves %s; stop it first", path)
	}
	_ = os.Remove(path)
	old := syscall.Umask(0o117)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, refusal.Wrap(refusal.InvalidState, err, "cannot listen on the socket %s", path)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, err
	}
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			l.Close()
			return nil, refusal.Wrap(refusal.InvalidInput, err, "socketGroup %q", group)
		}
		gid, _ := strconv.Atoi(g.Gid)
		// A socket the process made already has its group when socketGroup
		// is the service's own group (the shipped unit: Group=fleet-agent),
		// and a chown there is refused by the unit's system call filter
		// (~@privileged holds @chown): only change what differs.
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			l.Close()
			return nil, refusal.Wrap(refusal.InvalidState, err, "cannot read the socket %s", path)
		}
		if int(st.Gid) != gid {
			if err := os.Chown(path, -1, gid); err != nil {
				l.Close()
				return nil, refusal.Wrap(refusal.InvalidState, err,
					"cannot give the socket to group %s: run the agent with that group as its own (systemd: Group=%s in a drop-in), or leave socketGroup unset", group, group)
			}
		}
	}
	return l, nil
}
