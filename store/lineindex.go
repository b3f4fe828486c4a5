package store

import (
	"context"
	"slices"
	"sync"
)

// lineIndex holds the lineage edges of the records the text and order
// indexes hold (stored, not quarantined, not forgotten), in memory and
// rebuilt at Open like them. Ranking looks at the one-hop thread of every
// candidate of a recall, tens of records a query: through badger that is
// a lookup and a segment read per record and an iterator per child list,
// most of a recall's time at 100k records; here it is two map reads.
//
// A record's parents are listed whether or not they are held (a walk
// resolves each and skips those it cannot find), and a key's children are
// the held records that name it as a parent, so that a parent stored after
// its children finds them.
type lineIndex struct {
	mu       sync.RWMutex
	nodes    map[string]lineNode
	children map[string][]string // parent key → held records naming it
}

type lineNode struct {
	at      int64 // Store.orderAt, as in the order and text indexes
	parents []string
}

func newLineIndex() *lineIndex {
	return &lineIndex{nodes: map[string]lineNode{}, children: map[string][]string{}}
}

func (l *lineIndex) add(key string, at int64, parents []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.nodes[key]; ok {
		return
	}
	l.nodes[key] = lineNode{at: at, parents: parents}
	for _, p := range parents {
		l.children[p] = append(l.children[p], key)
	}
}

func (l *lineIndex) remove(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.nodes[key]
	if !ok {
		return
	}
	delete(l.nodes, key)
	for _, p := range n.parents {
		kids := slices.DeleteFunc(l.children[p], func(c string) bool { return c == key })
		if len(kids) == 0 {
			delete(l.children, p)
		} else {
			l.children[p] = kids
		}
	}
}

// LineageNode is one record as the lineage index holds it.
type LineageNode struct {
	Key string
	// At is the record's time as in KeyTime: its createdAt, or its
	// arrival if it is dated more than Options.MaxClockSkew after it.
	At       int64
	Parents  []string // as the record names them, held or not
	Children []string // held records naming it as a parent, in no order
}

// IndexedLineage returns the lineage of key from memory, as of every write
// acknowledged before the call; ok is false when key is not held or is
// not surfaced (quarantined, forgotten). The slices are the caller's.
func (s *Store) IndexedLineage(ctx context.Context, key string) (n LineageNode, ok bool, err error) {
	if s.closed.Load() {
		return LineageNode{}, false, ErrClosed
	}
	if err := s.waitIndexed(ctx); err != nil {
		return LineageNode{}, false, err
	}
	s.lines.mu.RLock()
	defer s.lines.mu.RUnlock()
	ln, ok := s.lines.nodes[key]
	if !ok {
		return LineageNode{}, false, nil
	}
	return LineageNode{Key: key, At: ln.at, Parents: slices.Clone(ln.parents),
		Children: slices.Clone(s.lines.children[key])}, true, nil
}
