package mesh

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"syscall"

	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// DefaultPort is the swarm port, TCP and UDP (QUIC): fixed so that an
// address given to other members (bootstrap, relays, invites) survives a
// restart.
const DefaultPort = 4747

// DefaultListen is every IPv4 and IPv6 interface on DefaultPort, TCP and
// QUIC.
func DefaultListen() []string {
	p := strconv.Itoa(DefaultPort)
	return []string{
		"/ip4/0.0.0.0/tcp/" + p, "/ip4/0.0.0.0/udp/" + p + "/quic-v1",
		"/ip6/::/tcp/" + p, "/ip6/::/udp/" + p + "/quic-v1",
	}
}

// PortInUseError: a listen address names a port another process (often
// another cmbnode daemon) holds.
type PortInUseError struct {
	Addr string // the listen multiaddr
	Err  error
}

func (e *PortInUseError) Error() string {
	return fmt.Sprintf("listen %s: the port is taken (another cmbnode daemon on this machine? give this one another port with --listen)", e.Addr)
}

func (e *PortInUseError) Unwrap() error { return e.Err }

// checkPorts probes each listen address with a fixed TCP or UDP port by
// binding it without SO_REUSEPORT. libp2p's own sockets set SO_REUSEPORT
// (TCP hole punching dials from the listen port), so two daemons could
// otherwise share one port and split its traffic silently; a plain bind
// fails against any socket holding the port, theirs included. A taken
// port is an error, or with fallback a random port and a WARN naming the
// taken one. The probe closes before libp2p binds: a process taking the
// port in between makes libp2p's own bind fail, which Start reports.
func checkPorts(listen []string, fallback bool, log *slog.Logger) ([]string, error) {
	out := make([]string, 0, len(listen))
	for _, s := range listen {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("start mesh: listen %q: %w", s, err)
		}
		perr := probe(a)
		if perr == nil {
			out = append(out, s)
			continue
		}
		if !errors.Is(perr, syscall.EADDRINUSE) {
			// Not ours to judge (an address this machine lacks, say):
			// libp2p reports it with its own words.
			out = append(out, s)
			continue
		}
		if !fallback {
			return nil, &PortInUseError{Addr: s, Err: perr}
		}
		r, err := zeroPort(a)
		if err != nil {
			return nil, err
		}
		if log != nil {
			log.Warn("swarm port taken; listening on a random port instead, so addresses given out for this node will not work after a restart", "port", portOf(a), "addr", s, "now", r)
		}
		out = append(out, r)
	}
	return out, nil
}

// probe binds a's TCP or UDP port for a moment; nil when free or not a
// fixed port.
func probe(a ma.Multiaddr) error {
	network, hostport, err := manet.DialArgs(a)
	if err != nil {
		return nil
	}
	_, port, err := net.SplitHostPort(hostport)
	if err != nil || port == "0" {
		return nil
	}
	switch network {
	case "tcp", "tcp4", "tcp6":
		l, err := net.Listen(network, hostport)
		if err != nil {
			return err
		}
		return l.Close()
	case "udp", "udp4", "udp6":
		c, err := net.ListenPacket(network, hostport)
		if err != nil {
			return err
		}
		return c.Close()
	}
	return nil
}

func portOf(a ma.Multiaddr) string {
	if p, err := a.ValueForProtocol(ma.P_TCP); err == nil {
		return p
	}
	p, _ := a.ValueForProtocol(ma.P_UDP)
	return p
}

// zeroPort is a with its TCP or UDP port set to 0.
func zeroPort(a ma.Multiaddr) (string, error) {
	var out ma.Multiaddr
	for _, c := range a {
		if c.Code() == ma.P_TCP || c.Code() == ma.P_UDP {
			z, err := ma.NewComponent(c.Protocol().Name, "0")
			if err != nil {
				return "", err
			}
			out = append(out, *z)
			continue
		}
		out = append(out, c)
	}
	return out.String(), nil
}
