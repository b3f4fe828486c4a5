package node

import (
	"sync"

	"github.com/cmbnode/cmbnode/node/svaf"
)

// anchorVectors caches the hashed-kernel vectors of anchors by key. A key
// names its record's texts (the address covers them), so a key's vectors
// never change; the same few anchors (the recent ones, and the nearest of
// a busy topic) judge record after record, and their vectors were
// recomputed for each. The cache holds at most anchorVectorsMax anchors
// (about 28 KB each at the default 512 dimensions) and starts over when
// full.
type anchorVectors struct {
	mu sync.Mutex
	m  map[string]svaf.Vectors
}

const anchorVectorsMax = 128

func (c *anchorVectors) get(key string) (svaf.Vectors, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[key]
	return v, ok
}

func (c *anchorVectors) put(key string, v svaf.Vectors) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= anchorVectorsMax {
		c.m = make(map[string]svaf.Vectors, anchorVectorsMax)
	}
	c.m[key] = v
}
