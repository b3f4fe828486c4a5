package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cmbnode/cmbnode/node/cgp"
	"github.com/cmbnode/cmbnode/node/ipc"
)

// SocketStats is what the endpoint reads of the local socket.
type SocketStats interface {
	Stats() ipc.Stats
}

// CGPStats is what the endpoint reads of the CGP engine.
type CGPStats interface {
	Stats() cgp.Stats
}

// RegisterLocal adds the cmbnode_socket_* families of sock and the
// cmbnode_cgp_* families of eng (each unless nil) to reg, read when
// scraped: how the local endpoints' limits are being hit.
func RegisterLocal(reg prometheus.Registerer, sock SocketStats, eng CGPStats) error {
	if err := reg.Register(newLocalCollector(sock, eng)); err != nil {
		return fmt.Errorf("metrics: register the local endpoints' families: %w", err)
	}
	return nil
}

type localCollector struct {
	sock    SocketStats
	eng     CGPStats
	sockFam []scalar[ipc.Stats]
	cgpFam  []scalar[cgp.Stats]
}

func newLocalCollector(sock SocketStats, eng CGPStats) *localCollector {
	type ss = ipc.Stats
	type cs = cgp.Stats
	return &localCollector{
		sock: sock, eng: eng,
		sockFam: []scalar[ss]{
			gauge("cmbnode_socket_clients", "Local socket clients connected now.", func(s *ss) int64 { return s.Clients }),
			counter("cmbnode_socket_accepted_total", "Local socket connections accepted.", func(s *ss) int64 { return s.Accepted }),
			counter("cmbnode_socket_dropped_total", "Local socket clients dropped for not reading what they were sent.", func(s *ss) int64 { return s.Dropped }),
			gauge("cmbnode_socket_held_bytes", "Bytes the socket holds for its clients: requests not answered, replies not written.", func(s *ss) int64 { return s.HeldBytes }),
			counter("cmbnode_socket_idle_closed_total", "Local socket connections closed for sending nothing (HelloTimeout) or going idle (IdleTimeout).", func(s *ss) int64 { return s.IdleClosed }),
			counter("cmbnode_socket_evicted_total", "Idle local socket connections closed to make room for a new client at the connection limit.", func(s *ss) int64 { return s.Evicted }),
			gauge("cmbnode_socket_listeners", "Local socket connections subscribed with listen.", func(s *ss) int64 { return s.Listeners }),
			counter("cmbnode_socket_listen_refused_total", "listen requests refused at the listener cap (MaxListeners, half the connection limit).", func(s *ss) int64 { return s.ListenRefused }),
			counter("cmbnode_socket_refused_total", "Local socket clients refused at the connection limit: every connection was listening or busy.", func(s *ss) int64 { return s.Refused }),
		},
		cgpFam: []scalar[cs]{
			counter("cmbnode_cgp_queries_total", "CGP queries received, over the socket and HTTP.", func(s *cs) int64 { return s.Queries }),
			counter("cmbnode_cgp_verifies_total", "CGP verify requests received.", func(s *cs) int64 { return s.Verifies }),
			counter("cmbnode_cgp_anchors_refused_total", "CGP queries refused for carrying more anchors than the per-query cap.", func(s *cs) int64 { return s.AnchorsRefused }),
			counter("cmbnode_cgp_busy_total", "CGP requests whose deadline passed while waiting for a turn among the concurrent ones.", func(s *cs) int64 { return s.Busy }),
			counter("cmbnode_cgp_deadline_exceeded_total", "CGP requests stopped at their deadline.", func(s *cs) int64 { return s.DeadlineExceeded }),
			counter("cmbnode_cgp_results_truncated_bytes_total", "CGP results that left frames out to stay within their byte budget.", func(s *cs) int64 { return s.BytesTruncated }),
		},
	}
}

// Describe implements prometheus.Collector.
func (c *localCollector) Describe(ch chan<- *prometheus.Desc) {
	if c.sock != nil {
		for _, s := range c.sockFam {
			ch <- s.desc
		}
	}
	if c.eng != nil {
		for _, s := range c.cgpFam {
			ch <- s.desc
		}
	}
}

// Collect implements prometheus.Collector.
func (c *localCollector) Collect(ch chan<- prometheus.Metric) {
	if c.sock != nil {
		st := c.sock.Stats()
		for _, s := range c.sockFam {
			ch <- prometheus.MustNewConstMetric(s.desc, s.typ, float64(s.get(&st)))
		}
	}
	if c.eng != nil {
		st := c.eng.Stats()
		for _, s := range c.cgpFam {
			ch <- prometheus.MustNewConstMetric(s.desc, s.typ, float64(s.get(&st)))
		}
	}
}
