package cgp

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gowebpki/jcs"

	"github.com/cmbnode/cmbnode/lineage/walk"
)

// Frame id prefixes. An id names what to recompute on verify, so it must be
// parseable back into a key (and, for a pinned episode, the pin).
const (
	memoryIDPrefix  = "memory:"
	episodeIDPrefix = "episode:"
	episodePinSep   = "@"
)

// Relation names live in our own namespace (U3).
const (
	RelParent = "mmp:parent"
	RelChild  = "mmp:child"
	RelMember = "mmp:member"
)

// Provenance vocabulary. Link types and methods are open strings; these
// name what we did.
const (
	linkTypeCMB         = "mmp.cmb"
	linkTypeDerivation  = "derivation"
	methodRenderMemory  = "cmbnode/render-memory/1"
	methodRenderEpisode = "cmbnode/render-episode/1"
	// methodUnconfirmedKey is appended to a CMB link's method when the
	// author's key came only with gossiped frames, never from a handshake.
	methodUnconfirmedKey = "+unconfirmed-key"
)

func memoryFrameID(key string) string { return memoryIDPrefix + key }

func episodeFrameID(key string, asOf *time.Time) string {
	if asOf == nil {
		return episodeIDPrefix + key
	}
	return episodeIDPrefix + key + episodePinSep + asOf.UTC().Format(time.RFC3339Nano)
}

// parseFrameID splits an id we minted. ok is false for anything else.
func parseFrameID(id string) (kind, key string, asOf *time.Time, ok bool) {
	switch {
	case strings.HasPrefix(id, memoryIDPrefix):
		key = id[len(memoryIDPrefix):]
		return KindMemory, key, nil, key != ""
	case strings.HasPrefix(id, episodeIDPrefix):
		rest := id[len(episodeIDPrefix):]
		if i := strings.Index(rest, episodePinSep); i >= 0 {
			t, err := ParseTime(rest[i+1:])
			if err != nil {
				return "", "", nil, false
			}
			rest = rest[:i]
			asOf = &t
		}
		return KindEpisode, rest, asOf, rest != ""
	}
	return "", "", nil, false
}

// CMBURI is the stable resource URI of a CMB: mmp://<group>/cmb/<key>.
func CMBURI(group, key string) string {
	return "mmp://" + url.PathEscape(group) + "/cmb/" + url.PathEscape(key)
}

func threadURI(group, key string) string {
	return "mmp://" + url.PathEscape(group) + "/thread/" + url.PathEscape(key)
}

// keyFromURI resolves an anchor to a CMB key: a CMB or thread URI we mint,
// or a bare key.
func keyFromURI(u string) (string, bool) {
	if !strings.HasPrefix(u, "mmp://") {
		if strings.HasPrefix(u, "cmb1-") || strings.HasPrefix(u, "cmb-") {
			return u, true
		}
		return "", false
	}
	parts := strings.Split(strings.TrimPrefix(u, "mmp://"), "/")
	if len(parts) != 3 || (parts[1] != "cmb" && parts[1] != "thread") {
		return "", false
	}
	k, err := url.PathUnescape(parts[2])
	return k, err == nil && k != ""
}

// clean makes peer-supplied text safe to carry: valid UTF-8 (json.Marshal
// would otherwise substitute U+FFFD after we digested the bytes) and trimmed.
func clean(s string) string { return strings.TrimSpace(strings.ToValidUTF8(s, "\uFFFD")) }

func shortKey(key string) string {
	if i := strings.IndexByte(key, '-'); i >= 0 && len(key) > i+13 {
		return key[:i+13] + "…"
	}
	return key
}

func author(r Record) string {
	if a := clean(r.AuthorName); a != "" {
		return a
	}
	if a := clean(r.CreatedBy); a != "" {
		return a
	}
	return "unknown author"
}

// firstLine returns the first line of s cut to n runes, or "" for empty or
// placeholder ("neutral") text.
func firstLine(s string, n int) string {
	s = clean(s)
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	if s == "" || strings.EqualFold(s, "neutral") {
		return ""
	}
	if utf8.RuneCountInString(s) > n {
		r := []rune(s)
		s = strings.TrimSpace(string(r[:n-1])) + "…"
	}
	return s
}

func recordTitle(r Record) string {
	if t := firstLine(r.Fields.Focus, 80); t != "" {
		return t
	}
	return "CMB " + shortKey(r.Key) + " by " + author(r)
}

func fmtAffect(v *float64) string { return strconv.FormatFloat(*v, 'f', -1, 64) }

func moodText(f Fields) string {
	m := clean(f.Mood)
	var aff []string
	if f.Valence != nil {
		aff = append(aff, "valence "+fmtAffect(f.Valence))
	}
	if f.Arousal != nil {
		aff = append(aff, "arousal "+fmtAffect(f.Arousal))
	}
	if len(aff) > 0 {
		m += " (" + strings.Join(aff, ", ") + ")"
	}
	return m
}

// renderMemory is the readable body of a memory frame: who and when, then
// all seven fields in their fixed MMP order.
func renderMemory(r Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CMB %s by %s at %s\n", r.Key, author(r), FormatTime(r.CreatedAt))
	f := r.Fields
	for _, kv := range [...][2]string{
		{"focus", clean(f.Focus)}, {"issue", clean(f.Issue)}, {"intent", clean(f.Intent)},
		{"motivation", clean(f.Motivation)}, {"commitment", clean(f.Commitment)},
		{"perspective", clean(f.Perspective)}, {"mood", moodText(f)},
	} {
		fmt.Fprintf(&b, "%s: %s\n", kv[0], kv[1])
	}
	return b.String()
}

// renderThreadEntry is one member of an episode narrative. Placeholder
// fields are left out so the narrative reads as prose.
func renderThreadEntry(r Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "- %s %s (%s): %s", FormatTime(r.CreatedAt), author(r), shortKey(r.Key), orNeutral(clean(r.Fields.Focus)))
	f := r.Fields
	for _, kv := range [...][2]string{
		{"issue", clean(f.Issue)}, {"intent", clean(f.Intent)}, {"motivation", clean(f.Motivation)},
		{"commitment", clean(f.Commitment)}, {"perspective", clean(f.Perspective)}, {"mood", moodText(f)},
	} {
		if kv[1] == "" || strings.EqualFold(kv[1], "neutral") {
			continue
		}
		fmt.Fprintf(&b, "; %s: %s", kv[0], kv[1])
	}
	b.WriteString("\n")
	return b.String()
}

func orNeutral(s string) string {
	if s == "" {
		return "neutral"
	}
	return s
}

// RecordDigest is SHA-256 over the JCS (RFC 8785) form of a record as
// received, so a host holding the CMB can recompute it; nil when raw is
// empty or not JSON.
func RecordDigest(raw []byte) *string {
	if len(raw) == 0 {
		return nil
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil
	}
	d := DigestBytes(canon)
	return &d
}

func strp(s string) *string { return &s }

func cmbMethod(key string) string {
	if strings.HasPrefix(key, "cmb1-") {
		return "mmp/cmb1"
	}
	return "mmp/cmb-legacy"
}

func (e *Engine) group(r Record) string {
	if r.Group != "" {
		return r.Group
	}
	return e.cfg.Group
}

func (e *Engine) cmbLink(r Record) Link {
	var d *string
	if r.RawDigest != "" {
		d = strp(r.RawDigest)
	} else {
		d = RecordDigest(r.Raw)
	}
	method := cmbMethod(r.Key)
	if r.KeyUnconfirmed {
		// Lower provenance, said where a host reads who vouches for the record.
		method += methodUnconfirmedKey
	}
	return Link{Type: linkTypeCMB, URI: strp(CMBURI(e.group(r), r.Key)), Digest: d,
		Method: strp(method), By: strp(clean(r.CreatedBy))}
}

func (e *Engine) derivationLink(method string) Link {
	return Link{Type: linkTypeDerivation, Method: strp(method), By: strp(e.cfg.ProviderName + "/" + e.cfg.ProviderVersion)}
}

func withBody(f *Frame, content string) {
	f.Content = &content
	d := DigestBytes([]byte(content))
	f.ContentDigest = &d
	f.TokenCost = TokenCost(content)
}

// TokenCost is the B3 accounting unit: ceil(UTF-8 bytes / 4), exactly.
func TokenCost(content string) uint32 { return uint32((len(content) + 3) / 4) }

func relationName(r Record) string {
	return fmt.Sprintf("%s (%s, %s)", recordTitle(r), author(r), shortKey(r.Key))
}

// memoryFrame renders one CMB. Score is set by the caller.
func (e *Engine) memoryFrame(ctx context.Context, r Record) (Frame, error) {
	f := Frame{
		ID:            memoryFrameID(r.Key),
		Kind:          KindMemory,
		Title:         recordTitle(r),
		URI:           CMBURI(e.group(r), r.Key),
		ValidFrom:     FormatTime(r.CreatedAt),
		CitationLabel: fmt.Sprintf("CMB %s (%s, %s)", r.Key, author(r), FormatTime(r.CreatedAt)),
		Provenance:    []Link{e.cmbLink(r), e.derivationLink(methodRenderMemory)},
	}
	if !r.ValidTo.IsZero() {
		f.ValidTo = FormatTime(r.ValidTo)
	}
	if !r.StoredAt.IsZero() {
		f.RecordedAt = FormatTime(r.StoredAt)
	}
	withBody(&f, renderMemory(r))
	for _, p := range r.Parents {
		pr, ok, err := e.cfg.Backend.Get(ctx, p)
		if err != nil {
			return Frame{}, fmt.Errorf("get parent %s: %w", p, err)
		}
		if ok {
			f.Relations = append(f.Relations, Relation{Rel: RelParent, TargetURI: CMBURI(e.group(pr), p), DisplayName: "parent: " + relationName(pr)})
		} else {
			f.Relations = append(f.Relations, Relation{Rel: RelParent, TargetURI: CMBURI(e.group(r), p), DisplayName: "parent CMB " + shortKey(p) + " (not held here)"})
		}
	}
	kids, err := e.children(ctx, r.Key)
	if err != nil {
		return Frame{}, err
	}
	for _, c := range kids {
		f.Relations = append(f.Relations, Relation{Rel: RelChild, TargetURI: CMBURI(e.group(c), c.Key), DisplayName: "remixed by: " + relationName(c)})
	}
	return f, nil
}

// children returns held children in time order (then key), so relations
// and threads are deterministic whatever order the store keeps them in.
func (e *Engine) children(ctx context.Context, key string) ([]Record, error) {
	keys, err := e.cfg.Backend.Children(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("children of %s: %w", key, err)
	}
	out := make([]Record, 0, len(keys))
	for _, k := range keys {
		r, ok, err := e.cfg.Backend.Get(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("get child %s: %w", k, err)
		}
		if ok {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, byTime)
	return out, nil
}

func byTime(a, b Record) int {
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.Key, b.Key)
}

// thread is the focal record's episode as walk.Thread tells it: nearest
// relatives first up to MaxThread members, in time order, and with a pin,
// nothing created after it (nor reached only through such a record).
func (e *Engine) thread(ctx context.Context, focal Record, asOf *time.Time) ([]Record, error) {
	v := newLineageView(e.cfg.Backend, focal)
	nodes, err := walk.Thread(ctx, v, focal.Key, walk.ThreadOptions{MaxMembers: e.cfg.MaxThread, AsOf: asOf})
	if err != nil {
		return nil, err
	}
	members := make([]Record, 0, len(nodes))
	for _, n := range nodes {
		// A hidden record is walked through (its neighbours still belong
		// to the thread) but shown only as the focal record.
		if r := v.read[n.Key]; !r.Hidden || n.Key == focal.Key {
			members = append(members, r)
		}
	}
	return members, nil
}

// episodeFrame renders a thread as one narrative. It reports ok=false when
// the focal record has no lineage at the pin: a lone CMB is already its
// memory frame.
func (e *Engine) episodeFrame(ctx context.Context, focal Record, asOf *time.Time) (Frame, []Record, bool, error) {
	members, err := e.thread(ctx, focal, asOf)
	if err != nil {
		return Frame{}, nil, false, err
	}
	if len(members) < 2 {
		return Frame{}, nil, false, nil
	}
	return e.episodeFrameOf(focal, members, asOf), members, true, nil
}

// episodeFrameOf renders a thread already collected by thread.
func (e *Engine) episodeFrameOf(focal Record, members []Record, asOf *time.Time) Frame {
	var b strings.Builder
	fmt.Fprintf(&b, "Thread of %d CMBs around %s, oldest first:\n", len(members), focal.Key)
	var latest, stored time.Time
	prov := make([]Link, 0, len(members)+1)
	rels := make([]Relation, 0, len(members))
	for _, m := range members {
		b.WriteString(renderThreadEntry(m))
		if m.CreatedAt.After(latest) {
			latest = m.CreatedAt
		}
		if m.StoredAt.After(stored) {
			stored = m.StoredAt
		}
		prov = append(prov, e.cmbLink(m))
		rels = append(rels, Relation{Rel: RelMember, TargetURI: CMBURI(e.group(m), m.Key), DisplayName: relationName(m)})
	}
	prov = append(prov, e.derivationLink(methodRenderEpisode))
	f := Frame{
		ID:    episodeFrameID(focal.Key, asOf),
		Kind:  KindEpisode,
		Title: fmt.Sprintf("Thread: %s (%d CMBs)", recordTitle(focal), len(members)),
		URI:   threadURI(e.group(focal), focal.Key),
		// The narrative as told is true once its latest part happened.
		ValidFrom:     FormatTime(latest),
		CitationLabel: fmt.Sprintf("thread of %d CMBs around %s (%s, %s)", len(members), focal.Key, author(focal), FormatTime(focal.CreatedAt)),
		Provenance:    prov,
		Relations:     rels,
	}
	if !stored.IsZero() {
		f.RecordedAt = FormatTime(stored)
	}
	withBody(&f, b.String())
	return f
}
