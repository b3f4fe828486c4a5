package daemon

import (
	"fmt"

	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/config"
)

// recallOptions maps the config's [embeddings] and [svaf] tables onto the
// node's options.
func recallOptions(cfg config.Config, o *node.Options) error {
	enc, err := cfg.Embeddings.Encoder()
	if err != nil {
		return fmt.Errorf("embeddings: %w", err)
	}
	surface, err := cfg.SVAF.Decisions()
	if err != nil {
		return fmt.Errorf("svaf.surface: %w", err)
	}
	o.Encoder = enc
	o.Dense = node.DenseOptions{Floor: cfg.Embeddings.Floor}
	o.SVAF = node.SVAFOptions{Config: cfg.SVAF.Evaluator(), Recent: anchorCount(cfg.SVAF.RecentAnchors),
		Nearest: anchorCount(cfg.SVAF.NearestAnchors), Surface: surface}
	return nil
}

// anchorCount maps the file's 0 ("none") onto the node's negative.
func anchorCount(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
