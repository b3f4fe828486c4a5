package daemon

import (
	"net"
	"os"
)

// NotifySocketEnv names the socket a service manager (systemd, Type=notify)
// reads readiness from.
const NotifySocketEnv = "NOTIFY_SOCKET"

// sdNotify sends one state ("READY=1", "STOPPING=1", …) to the service
// manager named by $NOTIFY_SOCKET: one datagram on a Unix socket, a leading
// "@" meaning the abstract namespace (sd_notify(3)). Without the variable it
// does nothing; a manager that cannot be reached is not the daemon's
// failure, so the error is only returned for logging.
func sdNotify(state string) error {
	path := os.Getenv(NotifySocketEnv)
	if path == "" {
		return nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}
