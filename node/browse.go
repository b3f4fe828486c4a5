package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/lineage"
	"github.com/cmbnode/cmbnode/lineage/walk"
	"github.com/cmbnode/cmbnode/store"
)

// Reads for browsing without a query: one memory by a key prefix, the
// newest memories, and a memory's thread. Like every read here they never
// surface a quarantined record.

// ErrAmbiguous is wrapped (with ErrBadRequest) when a key prefix matches
// more than one held record, or a peer name more than one peer
// (ResolvePeer); the message lists them.
var ErrAmbiguous = errors.New("ambiguous")

// MinKeyPrefix is the fewest digest characters a key prefix must carry:
// shorter ones would match most of a store and resolve nothing.
const MinKeyPrefix = 4

// maxListedMatches bounds how many matches an ambiguity error names.
const maxListedMatches = 8

// ResolveKey turns a full key or a unique key prefix into the key of a held,
// unquarantined record. A prefix may omit the scheme ("997a0e72" is tried
// as cmb1- and as legacy cmb-) and is compared case-insensitively. A full
// key is returned as given, held or not (Get then says not found). No match
// wraps ErrNotFound; several wrap ErrBadRequest and ErrAmbiguous and name
// the first few.
func (n *Node) ResolveKey(ctx context.Context, ref string) (string, error) {
	ref = strings.TrimSpace(ref)
	if cmb.SchemeOf(ref) != cmb.SchemeUnknown {
		return ref, nil
	}
	lower := strings.ToLower(ref)
	if cmb.SchemeOf(lower) != cmb.SchemeUnknown {
		return lower, nil
	}
	var prefixes []string
	switch {
	case strings.HasPrefix(lower, cmb.PrefixV1), strings.HasPrefix(lower, cmb.PrefixLegacy):
		prefixes = []string{lower}
	default:
		prefixes = []string{cmb.PrefixV1 + lower, cmb.PrefixLegacy + lower}
	}
	for _, p := range prefixes {
		digest := p[strings.IndexByte(p, '-')+1:]
		if len(digest) < MinKeyPrefix || !isHex(digest) {
			return "", fmt.Errorf("%w: %q is neither a CMB key nor a key prefix (cmb1- and at least %d hex digits)", ErrBadRequest, cmb.Truncate(ref, 80), MinKeyPrefix)
		}
	}
	keep := func(k string) bool { return !n.st.IsHidden(k) }
	var matches []string
	for _, p := range prefixes {
		m, err := n.st.KeysWithPrefix(ctx, p, maxListedMatches+1-len(matches), keep)
		if err != nil {
			return "", fmt.Errorf("resolve key prefix %q: %w", ref, err)
		}
		matches = append(matches, m...)
		if len(matches) > maxListedMatches {
			break
		}
	}
	switch len(matches) {
	case 0:
		return "", fmt.Errorf("%w: no record has a key starting with %q", ErrNotFound, ref)
	case 1:
		return matches[0], nil
	}
	listed := strings.Join(matches[:min(len(matches), maxListedMatches)], ", ")
	if len(matches) > maxListedMatches {
		listed += ", …"
	}
	return "", fmt.Errorf("%w: %w: %q matches several records (%s); give more of the key", ErrBadRequest, ErrAmbiguous, ref, listed)
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) {
			return false
		}
	}
	return true
}

// Memory is one held record as agents read it.
type Memory struct {
	Key       string     `json:"key"`
	CreatedBy string     `json:"createdBy"`
	CreatedAt int64      `json:"createdAt"`
	Group     string     `json:"group"`
	Fields    FieldsJSON `json:"fields"`
	Parents   []string   `json:"parents,omitempty"`
}

func memoryOf(rec *cmb.Record) Memory {
	return Memory{Key: rec.Key, CreatedBy: rec.CreatedBy, CreatedAt: rec.CreatedAt, Group: rec.Group,
		Fields: FieldsView(&rec.Fields), Parents: rec.Parents()}
}

// MaxRecent bounds one Recent listing.
const MaxRecent = 1000

// RecentOptions select a Recent listing. Zero values select everything.
type RecentOptions struct {
	Author string    // a nodeId (or agent name) as records carry it in createdBy, or a node's display name
	Since  time.Time // inclusive
	Limit  int       // 0: 20; at most MaxRecent
}

// Recent lists the newest held records, newest first, optionally by one
// author and no older than Since. Times are the store's order times (the
// record's createdAt unless it lay far in the future on arrival).
func (n *Node) Recent(ctx context.Context, o RecentOptions) ([]Memory, error) {
	if o.Limit > MaxRecent {
		return nil, fmt.Errorf("%w: limit %d is over %d", ErrBadRequest, o.Limit, MaxRecent)
	}
	if o.Limit <= 0 {
		o.Limit = 20
	}
	w := store.Window{AnyGroup: true, Reverse: true}
	if o.Author != "" {
		// The author index keys authors as the records spell them; nodeIds
		// are minted lowercase. A name is looked up (resolveAuthor).
		a, err := n.resolveAuthor(ctx, strings.TrimSpace(o.Author))
		if err != nil {
			return nil, err
		}
		w.Author = a
	}
	if !o.Since.IsZero() {
		w.From = o.Since.UnixMilli()
	}
	out := []Memory{}
	err := n.st.Scan(ctx, w, func(kt store.KeyTime) error {
		if n.st.IsHidden(kt.Key) || n.Hidden(kt.Key) {
			return nil
		}
		rec, err := n.record(ctx, kt.Key)
		if errors.Is(err, ErrNotFound) {
			return nil // purged since the scan began
		}
		if err != nil {
			return err
		}
		out = append(out, memoryOf(rec))
		if len(out) >= o.Limit {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, fmt.Errorf("recent records: %w", err)
	}
	return out, nil
}

var errEnough = errors.New("enough")

// Thread roles: where a member stands relative to the focal record.
const (
	RoleAncestor   = "ancestor"
	RoleFocal      = "focal"
	RoleDescendant = "descendant"
)

// ThreadMember is one record of a thread.
type ThreadMember struct {
	Memory
	Role  string `json:"role"`
	Depth int    `json:"depth"` // lineage hops from the focal record
}

// MaxThread bounds one thread's members.
const MaxThread = 200

// Thread is the episode around key as walk.Thread tells it (the one CGP's
// episode frame renders): the record, its ancestors along parent links and
// its descendants along child links, nearest first up to maxMembers (0:
// 24, as CGP's episodes; at most MaxThread). It is returned as a story:
// ancestors, the record, descendants, each part oldest first (ties by key).
// A quarantined member is left out, as everywhere; so is a member the SVAF
// surface policy hides (Hidden), unless it is the record asked for: the
// walk still passes through it, so its neighbours stay in the thread.
func (n *Node) Thread(ctx context.Context, key string, maxMembers int) ([]ThreadMember, error) {
	if maxMembers > MaxThread {
		return nil, fmt.Errorf("%w: limit %d is over %d", ErrBadRequest, maxMembers, MaxThread)
	}
	if maxMembers <= 0 {
		maxMembers = 24
	}
	focal, err := n.record(ctx, key)
	if err != nil {
		return nil, err
	}
	nodes, err := walk.Thread(ctx, lineage.View(n.st), key, walk.ThreadOptions{MaxMembers: maxMembers})
	if err != nil {
		return nil, err
	}
	// A thread walks parent links up and child links down only, so every
	// member other than the focal record is an ancestor (listed in its
	// ancestors, §15.2) or a descendant.
	ancestors := map[string]bool{}
	for _, a := range focal.Ancestors() {
		ancestors[a] = true
	}
	out := make([]ThreadMember, 0, len(nodes))
	for _, nd := range nodes {
		if n.st.IsHidden(nd.Key) || (nd.Key != key && n.Hidden(nd.Key)) {
			continue
		}
		rec := focal
		if nd.Key != key {
			if rec, err = n.record(ctx, nd.Key); errors.Is(err, ErrNotFound) {
				continue
			} else if err != nil {
				return nil, err
			}
		}
		role := RoleDescendant
		switch {
		case nd.Key == key:
			role = RoleFocal
		case ancestors[nd.Key]:
			role = RoleAncestor
		}
		out = append(out, ThreadMember{Memory: memoryOf(rec), Role: role, Depth: nd.Depth})
	}
	rank := map[string]int{RoleAncestor: 0, RoleFocal: 1, RoleDescendant: 2}
	// walk.Thread returns creation order; a stable sort by role keeps it
	// within each part.
	slices.SortStableFunc(out, func(a, b ThreadMember) int { return rank[a.Role] - rank[b.Role] })
	return out, nil
}

// MaxAuthorNames bounds one AuthorNames lookup.
const MaxAuthorNames = 1000

// AuthorNames maps each author (a nodeId as records carry it) to the name
// it goes by here (AuthorName), leaving out those with none known.
func (n *Node) AuthorNames(ctx context.Context, authors []string) (map[string]string, error) {
	if len(authors) > MaxAuthorNames {
		return nil, fmt.Errorf("%w: %d authors asked for, at most %d", ErrBadRequest, len(authors), MaxAuthorNames)
	}
	out := make(map[string]string, len(authors))
	for _, a := range authors {
		if name := n.AuthorName(ctx, a); name != "" {
			out[a] = name
		}
	}
	return out, nil
}
