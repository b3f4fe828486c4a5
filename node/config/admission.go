package config

import (
	"fmt"
	"math"
	"time"
)

// Admission bounds what peers can make the node spend on received records,
// missing parents and the roster (docs/mesh.md "Limits").
type Admission struct {
	// MaxFutureSkew refuses a received record dated more than this after
	// this node's clock ("future-timestamp").
	MaxFutureSkew Duration `toml:"max_future_skew"`
	// AuthorRate (records/s) and AuthorBurst are each author's quota of
	// new records pushed to this node by gossip ("author-rate" beyond it).
	AuthorRate  float64 `toml:"author_rate"`
	AuthorBurst int     `toml:"author_burst"`
	// PendingPerAuthor caps the missing parents one author's records may
	// have waiting; PendingTTL is how long one is sought before catch-up
	// is left to bring it; PendingRetryMax caps its retry backoff.
	PendingPerAuthor int      `toml:"pending_per_author"`
	PendingTTL       Duration `toml:"pending_ttl"`
	PendingRetryMax  Duration `toml:"pending_retry_max"`
	// RosterIdleTTL and RosterMaxIdle expire roster entries of nodeIds that
	// authored no stored record: unseen this long, or beyond this many.
	RosterIdleTTL Duration `toml:"roster_idle_ttl"`
	RosterMaxIdle int      `toml:"roster_max_idle"`
}

// DefaultAdmission are generous limits: no honest member reaches them.
func DefaultAdmission() Admission {
	return Admission{
		MaxFutureSkew: Duration{time.Hour}, AuthorRate: 100, AuthorBurst: 20000,
		PendingPerAuthor: 1000, PendingTTL: Duration{time.Hour}, PendingRetryMax: Duration{10 * time.Minute},
		RosterIdleTTL: Duration{7 * 24 * time.Hour}, RosterMaxIdle: 1024,
	}
}

func (a Admission) validate() error {
	if r := a.AuthorRate; math.IsNaN(r) || math.IsInf(r, 0) || r <= 0 {
		return fmt.Errorf("admission.author_rate %v: use a positive number of records per second", r)
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"author_burst", a.AuthorBurst}, {"pending_per_author", a.PendingPerAuthor}, {"roster_max_idle", a.RosterMaxIdle}} {
		if v.n <= 0 {
			return fmt.Errorf("admission.%s %d: use a positive number", v.name, v.n)
		}
	}
	for _, v := range []struct {
		name string
		d    Duration
	}{{"max_future_skew", a.MaxFutureSkew}, {"pending_ttl", a.PendingTTL}, {"pending_retry_max", a.PendingRetryMax}, {"roster_idle_ttl", a.RosterIdleTTL}} {
		if v.d.Duration <= 0 {
			return fmt.Errorf("admission.%s %s: use a positive duration", v.name, v.d)
		}
	}
	return nil
}

func renderAdmission(c Config) string {
	a := c.Admission
	q := func(d Duration) string { return fmt.Sprintf("%q", d.String()) }
	return fmt.Sprintf(`
# Limits on what peers can make this node spend (docs/mesh.md "Limits").
# Each refusal is counted in /metrics and logged at DEBUG with its reason.
[admission]
# Refuse a received record dated more than this ahead of this clock
# ("future-timestamp"); one dated ahead by less is clamped (max_clock_skew).
max_future_skew = %s
# Each author's quota of new records pushed here by gossip: author_rate a
# second, bursts of author_burst. Records over it are refused ("author-rate")
# and arrive later by catch-up, which this node paces and is not charged.
author_rate = %v
author_burst = %d
# Missing parents of received records: at most pending_per_author waiting
# per author, retried with backoff up to pending_retry_max, given up after
# pending_ttl (catch-up brings whatever a peer holds).
pending_per_author = %d
pending_ttl = %s
pending_retry_max = %s
# Roster entries of nodeIds that authored no stored record (handshakes
# alone) expire when unseen for roster_idle_ttl, and beyond roster_max_idle
# the least recently seen go first. Connected and trusted peers stay.
roster_idle_ttl = %s
roster_max_idle = %d
`, q(a.MaxFutureSkew), a.AuthorRate, a.AuthorBurst, a.PendingPerAuthor, q(a.PendingTTL), q(a.PendingRetryMax), q(a.RosterIdleTTL), a.RosterMaxIdle)
}
