// Package metrics exposes the node's counters in the Prometheus text format
// (version 0.0.4), written by hand so the daemon needs no client library.
// The daemon mounts Handler on --metrics ADDR (loopback by default).
package metrics

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"cmbnode/node"
)

// Source contributes metrics of its own (the mesh does).
type Source interface {
	WriteMetrics(w *Writer)
}

// Handler serves the node's counters plus those of each non-nil source.
func Handler(n *node.Node, sources ...Source) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			rw.Header().Set("Allow", "GET, HEAD")
			http.Error(rw, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		rw.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		bw := bufio.NewWriter(rw)
		w := &Writer{w: bw}
		WriteNode(w, n)
		for _, s := range sources {
			if s != nil {
				s.WriteMetrics(w)
			}
		}
		_ = bw.Flush()
	})
}

// WriteNode writes the node core's counters.
func WriteNode(w *Writer, n *node.Node) {
	s := n.Counters.Snapshot()
	w.Counter("cmbnode_cmbs_authored_total", "Records authored on this node.", s.Authored)
	w.Counter("cmbnode_cmbs_received_total", "Records received from peers on every path (gossip, fetch, catch-up).", s.Received)
	w.Counter("cmbnode_cmbs_accepted_total", "Received records stored for the first time.", s.Accepted)
	w.Counter("cmbnode_cmbs_duplicates_total", "Received records already held.", s.Duplicates)
	w.Counter("cmbnode_cmbs_relayed_total", "Valid records directed to another member: relayed, never stored.", s.Relayed)
	w.Counter("cmbnode_key_conflicts_total", "Authors or peers presenting a key other than the pinned one.", s.KeyConflicts)
	w.Counter("cmbnode_keys_replaced_total", "Author keys known only from gossip that a handshake replaced.", s.KeysReplaced)
	w.Counter("cmbnode_cmbs_quarantined_total", "Records quarantined because the author key they were admitted under was replaced.", s.Quarantined)
	w.Counter("cmbnode_cmbs_fetched_total", "Records obtained by fetching a missing parent.", s.Fetched)
	w.Counter("cmbnode_cmbs_caught_up_total", "Records obtained by catch-up.", s.CaughtUp)
	w.Header("cmbnode_cmbs_rejected_total", "Rejected records and handshakes, by reason.", "counter")
	for _, reason := range s.RejectReasons() {
		w.Sample("cmbnode_cmbs_rejected_total", s.Rejected[reason], "reason", reason)
	}
	w.Gauge("cmbnode_store_cmbs", "Records held in the store.", int64(n.Store().Count()))
	w.Counter("cmbnode_event_subscribers_dropped_total", "Local event listeners dropped for falling behind.", n.Events().Dropped())
}

// Writer writes metric families.
type Writer struct {
	w   io.Writer
	err error
}

// Header writes a family's HELP and TYPE lines.
func (w *Writer) Header(name, help, typ string) {
	w.printf("# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(help), name, typ)
}

// Sample writes one sample with label name/value pairs.
func (w *Writer) Sample(name string, v int64, labels ...string) {
	var b strings.Builder
	b.WriteString(name)
	if len(labels) > 1 {
		b.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(labels[i])
			b.WriteString(`="`)
			b.WriteString(escapeLabel(labels[i+1]))
			b.WriteByte('"')
		}
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	b.WriteString(strconv.FormatInt(v, 10))
	b.WriteByte('\n')
	w.printf("%s", b.String())
}

// Counter writes a single-sample counter family.
func (w *Writer) Counter(name, help string, v int64) {
	w.Header(name, help, "counter")
	w.Sample(name, v)
}

// Gauge writes a single-sample gauge family.
func (w *Writer) Gauge(name, help string, v int64) {
	w.Header(name, help, "gauge")
	w.Sample(name, v)
}

// Map writes a labelled family in label order.
func (w *Writer) Map(name, help, typ, label string, m map[string]int64) {
	w.Header(name, help, typ)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w.Sample(name, m[k], label, k)
	}
}

func (w *Writer) printf(format string, a ...any) {
	if w.err == nil {
		_, w.err = fmt.Fprintf(w.w, format, a...)
	}
}

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`).Replace(s)
}

// Server is a running metrics endpoint.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// Serve listens on addr (e.g. "127.0.0.1:9464") and serves h at every path.
// Close stops it and waits for the serving goroutine.
func Serve(addr string, h http.Handler, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	s := &Server{
		srv: &http.Server{
			Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10,
		},
		ln: ln, done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && log != nil {
			log.Error("metrics endpoint stopped", "addr", addr, "err", err)
		}
	}()
	return s, nil
}

// Addr is the address actually listened on (useful with port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close shuts the endpoint down, giving in-flight scrapes a moment.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}
