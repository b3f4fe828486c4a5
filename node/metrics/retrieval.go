package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/svaf"
)

// retrievalCollector exports what admission and the dense encoder do: the
// SVAF verdicts by decision, and the encoder's progress when one is
// configured.
type retrievalCollector struct {
	n                                 *node.Node
	verdicts, vectors, pending, fails *prometheus.Desc
}

func newRetrievalCollector(n *node.Node) *retrievalCollector {
	return &retrievalCollector{
		n:        n,
		verdicts: prometheus.NewDesc("cmbnode_svaf_verdicts_total", "SVAF admission verdicts reached since start, by decision.", []string{"decision"}, nil),
		vectors:  prometheus.NewDesc("cmbnode_dense_vectors", "Records with vectors from the dense encoder.", []string{"kernel"}, nil),
		pending:  prometheus.NewDesc("cmbnode_dense_pending", "Records waiting for the dense encoder.", []string{"kernel"}, nil),
		fails:    prometheus.NewDesc("cmbnode_dense_failures_total", "Dense encoder rounds that failed (retried later).", []string{"kernel"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *retrievalCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.verdicts
	ch <- c.vectors
	ch <- c.pending
	ch <- c.fails
}

// Collect implements prometheus.Collector.
func (c *retrievalCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.n.SVAFCounts()
	for _, d := range svaf.Decisions() {
		ch <- prometheus.MustNewConstMetric(c.verdicts, prometheus.CounterValue, float64(counts[string(d)]), string(d))
	}
	if d, ok := c.n.Dense(); ok {
		ch <- prometheus.MustNewConstMetric(c.vectors, prometheus.GaugeValue, float64(d.Indexed), d.Kernel)
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(d.Pending), d.Kernel)
		ch <- prometheus.MustNewConstMetric(c.fails, prometheus.CounterValue, float64(d.Failures), d.Kernel)
	}
}
