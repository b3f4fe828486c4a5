package node

import (
	"context"
	"strings"
	"sync"

	"github.com/cmbnode/cmbnode/store"
)

// Author names in recall (docs/recall.md "Author names").
//
// A query word that is a word of an author's display name is evidence for
// that author's records. Names are not in the text index: a name is the
// roster's, not the record's, and can change with the next handshake, while
// the index is built from record bytes alone (so store.Check can rebuild it
// from them). nameIndex is a small in-memory map from author to the words
// of its name, rebuilt from the roster (and this node's identity) at Open
// and updated whenever a handshake pins a peer, so a rename takes effect on
// the next query and nothing stored changes.

// NameWeight is how much relevance a record takes when the query names its
// author: NameWeight × the share of the author's name words the query holds.
const NameWeight = 0.5

// maxNameCandidates bounds how many of a named author's records (newest
// first) enter a recall as candidates through the name alone.
const maxNameCandidates = 1000

type nameIndex struct {
	mu       sync.RWMutex
	byAuthor map[string][]string            // author (lowercase) → name words
	byWord   map[string]map[string]struct{} // name word → authors
}

func newNameIndex() *nameIndex {
	return &nameIndex{byAuthor: map[string][]string{}, byWord: map[string]map[string]struct{}{}}
}

// nameWords are a name's searchable words: folded as queries are, words of
// one letter left out.
func nameWords(name string) []string {
	var out []string
	seen := map[string]bool{}
	for _, w := range store.Tokenize(name) {
		if len([]rune(w)) < 2 || seen[w] {
			continue
		}
		seen[w] = true
		out = append(out, w)
	}
	return out
}

// set makes name the author's (an empty name forgets it).
func (x *nameIndex) set(author, name string) {
	author = strings.ToLower(author)
	words := nameWords(name)
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, w := range x.byAuthor[author] {
		delete(x.byWord[w], author)
		if len(x.byWord[w]) == 0 {
			delete(x.byWord, w)
		}
	}
	delete(x.byAuthor, author)
	if len(words) == 0 {
		return
	}
	x.byAuthor[author] = words
	for _, w := range words {
		if x.byWord[w] == nil {
			x.byWord[w] = map[string]struct{}{}
		}
		x.byWord[w][author] = struct{}{}
	}
}

// match returns the authors the query names, each with the share of its
// name's words the query holds, in (0,1].
func (x *nameIndex) match(query string) map[string]float64 {
	words := store.Tokenize(query)
	x.mu.RLock()
	defer x.mu.RUnlock()
	if len(x.byWord) == 0 {
		return nil
	}
	hits := map[string]int{}
	seen := map[string]bool{}
	for _, w := range words {
		if seen[w] {
			continue
		}
		seen[w] = true
		for a := range x.byWord[w] {
			hits[a]++
		}
	}
	if len(hits) == 0 {
		return nil
	}
	out := make(map[string]float64, len(hits))
	for a, h := range hits {
		out[a] = float64(h) / float64(len(x.byAuthor[a]))
	}
	return out
}

// loadNames fills the index from this node's identity and the roster.
func (n *Node) loadNames(ctx context.Context) error {
	n.names.set(n.id.NodeID, n.id.Name)
	peers, err := n.st.Peers(ctx)
	if err != nil {
		return err
	}
	for _, p := range peers {
		if p.Name != "" && !strings.EqualFold(p.NodeID, n.id.NodeID) {
			n.names.set(p.NodeID, p.Name)
		}
	}
	return nil
}

// authorMatches are the records whose author a query names, with each
// one's name evidence: up to maxNameCandidates newest of each author.
func (n *Node) authorMatches(ctx context.Context, query string, asOf int64) (map[string]float64, map[string]int64, error) {
	m := n.names.match(query)
	if len(m) == 0 {
		return nil, nil, nil
	}
	ev := map[string]float64{}
	at := map[string]int64{}
	for author, share := range m {
		w := store.Window{Author: author, Reverse: true, To: asOf + 1, Limit: maxNameCandidates}
		err := n.st.Scan(ctx, w, func(kt store.KeyTime) error {
			ev[kt.Key] = max(ev[kt.Key], NameWeight*share)
			at[kt.Key] = kt.CreatedAt
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
	}
	return ev, at, nil
}
