package main

import (
	"fmt"
	"time"

	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/cmbnode/cmbnode/node"
)

// syncLine words a catch-up in progress for `status`:
// "8,798 of ~25,000 from 1 peer, ETA 6 s".
func syncLine(p node.SyncProgress) string {
	pr := message.NewPrinter(language.English)
	peers := "peers"
	if p.Peers == 1 {
		peers = "peer"
	}
	s := pr.Sprintf("%d of ~%d from %d %s", p.Received, p.Expected, p.Peers, peers)
	if p.ETA > 0 {
		s += ", ETA " + etaWords(p.ETA)
	}
	return s
}

func etaWords(d time.Duration) string {
	switch s := int64(d.Round(time.Second) / time.Second); {
	case s < 1:
		return "<1 s"
	case s < 120:
		return fmt.Sprintf("%d s", s)
	default:
		return fmt.Sprintf("%d min", (s+30)/60)
	}
}
