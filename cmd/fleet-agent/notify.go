package main

import (
	"context"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/rs/zerolog"
)

// notifier tells systemd (Type=notify) that the agent is ready, alive and
// stopping. Outside systemd (no NOTIFY_SOCKET) every call is a no-op.
// go-systemd is used for the protocol: the socket's address forms and the
// watchdog's environment are its job, well kept there.
type notifier struct {
	log zerolog.Logger
}

func newNotifier(log zerolog.Logger) *notifier { return &notifier{log: log} }

func (n *notifier) send(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		n.log.Warn().Err(err).Str("state", state).Msg("cannot notify systemd")
	}
}

func (n *notifier) ready()    { n.send(daemon.SdNotifyReady) }
func (n *notifier) stopping() { n.send(daemon.SdNotifyStopping) }

// watchdog pings at half the WatchdogSec systemd asked for, until ctx ends.
func (n *notifier) watchdog(ctx context.Context) {
	every, err := daemon.SdWatchdogEnabled(false)
	if err != nil || every == 0 {
		return
	}
	t := time.NewTicker(every / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.send(daemon.SdNotifyWatchdog)
		}
	}
}
