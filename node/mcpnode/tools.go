package mcpnode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/ipc"
)

func boolp(b bool) *bool { return &b }

// read is the annotation of every tool that only reads the node.
func read(title string) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{Title: title, ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolp(false)}
}

func (s *server) addTools() {
	addTool(s.srv, s.opts.CheckOutput, &mcp.Tool{
		Name:  "remember",
		Title: "Remember in the group's mesh memory",
		Description: "Store a memory (a CMB) signed by this node and share it with the mesh group. " +
			"Give focus (what it is about) and any of issue, intent, motivation, commitment, perspective, mood; " +
			"parents are the keys (or unique key prefixes) of memories it builds on; " +
			"to (a nodeId or a peer's name) seals it so only that member can read it. Returns the key; " +
			"the same memory twice is one memory (duplicate: true).",
		InputSchema: schemaFor[rememberIn](func(p map[string]*jsonschema.Schema) {
			limitText(p, MaxFieldChars, "focus", "issue", "intent", "motivation", "commitment", "perspective")
			p["focus"].MinLength = maxLen(1)
			p["mood"] = moodSchema()
			p["parents"].MaxItems = maxLen(MaxParents)
			p["parents"].Items.MaxLength = maxLen(MaxRefChars)
			limitText(p, MaxNameChars, "to")
		}),
		// Remembering the same fields again changes nothing: a duplicate.
		Annotations: &mcp.ToolAnnotations{Title: "Remember", ReadOnlyHint: false, DestructiveHint: boolp(false),
			IdempotentHint: true, OpenWorldHint: boolp(true)},
	}, s.remember)

	addTool(s.srv, s.opts.CheckOutput, &mcp.Tool{
		Name:  "recall",
		Title: "Recall from the group's mesh memory",
		Description: "Search the memories this node holds (its own and its group's) for query text; " +
			"ranked by relevance blended with recency, best first. Narrow by author (a nodeId or a name) and by " +
			"since/until (RFC 3339, a date, or an age like 36h or 7d).",
		InputSchema: schemaFor[recallIn](func(p map[string]*jsonschema.Schema) {
			limitText(p, MaxQueryChars, "query")
			p["query"].MinLength = maxLen(1)
			limitInt(p, "limit", 1, maxRecall, defaultRecall)
			limitText(p, MaxNameChars, "author")
			limitText(p, MaxTimeChars, "since", "until")
			p["min_score"].Minimum, p["min_score"].Maximum = num(0), num(1)
			p["min_score"].Description += " (0 to 1; default 0: every match)"
		}),
		Annotations: read("Recall"),
	}, s.recall)

	addTool(s.srv, s.opts.CheckOutput, &mcp.Tool{
		Name:        "get",
		Title:       "Get one memory",
		Description: "Read one memory by its key or a unique key prefix (at least 4 hex digits), with the keys of its parents and how this node holds it.",
		InputSchema: schemaFor[keyIn](func(p map[string]*jsonschema.Schema) { limitText(p, MaxRefChars, "key") }),
		Annotations: read("Get memory"),
	}, s.get)

	addTool(s.srv, s.opts.CheckOutput, &mcp.Tool{
		Name:  "thread",
		Title: "A memory's lineage thread",
		Description: "The thread around a memory: the memories it builds on (ancestors), the memory, then those " +
			"that build on it (descendants), each part oldest first; the nearest are kept up to limit.",
		InputSchema: schemaFor[threadIn](func(p map[string]*jsonschema.Schema) {
			limitText(p, MaxRefChars, "key")
			limitInt(p, "limit", 2, maxThread, defaultThread)
		}),
		Annotations: read("Thread"),
	}, s.thread)

	addTool(s.srv, s.opts.CheckOutput, &mcp.Tool{
		Name:        "recent",
		Title:       "The newest memories",
		Description: "Browse the newest memories without a query, newest first; optionally by one author (a nodeId or a name) or since a time (RFC 3339, a date, or an age like 36h or 7d).",
		InputSchema: schemaFor[recentIn](func(p map[string]*jsonschema.Schema) {
			limitInt(p, "limit", 1, maxRecent, defaultRecent)
			limitText(p, MaxNameChars, "author")
			limitText(p, MaxTimeChars, "since")
		}),
		Annotations: read("Recent"),
	}, s.recent)

	addTool(s.srv, s.opts.CheckOutput, &mcp.Tool{
		Name:        "peers",
		Title:       "Who is in the group",
		Description: "The group members this node is connected to now: nodeId, name, libp2p peer id and addresses.",
		InputSchema: schemaFor[noArgs](nil),
		Annotations: read("Peers"),
	}, s.peers)

	addTool(s.srv, s.opts.CheckOutput, &mcp.Tool{
		Name:        "status",
		Title:       "How the node is doing",
		Description: "This node's identity, group, addresses, how many peers it is connected to and how many memories it holds.",
		InputSchema: schemaFor[noArgs](nil),
		Annotations: read("Status"),
	}, s.status)
}

type rememberIn struct {
	Focus       string   `json:"focus" jsonschema:"what the memory is about (required)"`
	Issue       string   `json:"issue,omitempty" jsonschema:"the problem or question at stake"`
	Intent      string   `json:"intent,omitempty" jsonschema:"what is meant to happen"`
	Motivation  string   `json:"motivation,omitempty" jsonschema:"why it matters"`
	Commitment  string   `json:"commitment,omitempty" jsonschema:"what was promised or decided"`
	Perspective string   `json:"perspective,omitempty" jsonschema:"whose point of view, or from where"`
	Mood        *mood    `json:"mood,omitempty"`
	Parents     []string `json:"parents,omitempty" jsonschema:"keys or unique key prefixes of the memories this one builds on"`
	To          string   `json:"to,omitempty" jsonschema:"a group member (nodeId or peer name) to seal it for: only they can read it"`
}

// RememberOut is the remember tool's result.
type RememberOut struct {
	Key       string   `json:"key" jsonschema:"the memory's content address"`
	Duplicate bool     `json:"duplicate" jsonschema:"true when this node already held exactly this memory"`
	Parents   []string `json:"parents,omitempty" jsonschema:"the parents' full keys"`
	To        string   `json:"to,omitempty" jsonschema:"the recipient's nodeId, for a sealed memory"`
}

func (s *server) remember(ctx context.Context, _ *mcp.CallToolRequest, in rememberIn) (*mcp.CallToolResult, RememberOut, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	if strings.TrimSpace(in.Focus) == "" {
		return nil, RememberOut{}, errors.New("remember: focus must say what the memory is about")
	}
	fields := map[string]any{"focus": in.Focus}
	for name, v := range map[string]string{"issue": in.Issue, "intent": in.Intent, "motivation": in.Motivation,
		"commitment": in.Commitment, "perspective": in.Perspective} {
		if v != "" {
			fields[name] = v
		}
	}
	if in.Mood != nil {
		fields["mood"] = in.Mood
	}
	a := ipc.RememberArgs{Fields: fields}
	for _, p := range in.Parents {
		key, err := s.resolveKey(ctx, p)
		if err != nil {
			return nil, RememberOut{}, fmt.Errorf("remember: parent %q: %w", p, err)
		}
		a.Parents = append(a.Parents, key)
	}
	if in.To != "" {
		id, err := s.resolveMember(ctx, in.To)
		if err != nil {
			return nil, RememberOut{}, fmt.Errorf("remember: to: %w", err)
		}
		a.To = id
	}
	var r node.Result
	err := s.d.do(ctx, func(c *ipc.Client) (err error) {
		r, err = c.Remember(ctx, a)
		return err
	})
	if err != nil {
		return nil, RememberOut{}, fmt.Errorf("remember: %w", err)
	}
	if !r.Duplicate {
		// The socket does not echo this node's own records to listeners.
		s.recentChanged(ctx)
	}
	out := RememberOut{Key: r.Key, Duplicate: r.Duplicate, Parents: a.Parents, To: a.To}
	text := "Remembered " + r.Key
	if r.Duplicate {
		text = "Already remembered (duplicate): " + r.Key
	}
	if a.To != "" {
		text += " (sealed for " + a.To + ")"
	}
	return textResult(text + "\n"), out, nil
}

type recallIn struct {
	Query  string `json:"query" jsonschema:"what to look for, in words"`
	Limit  int    `json:"limit,omitempty" jsonschema:"how many memories at most"`
	Author string `json:"author,omitempty" jsonschema:"only memories by this author: a nodeId or a name"`
	Since  string `json:"since,omitempty" jsonschema:"only memories created at or after this time"`
	Until  string `json:"until,omitempty" jsonschema:"only memories created before this time"`
	// MinScore is the socket's min_score, checked by the schema and again
	// by the daemon.
	MinScore float64 `json:"min_score,omitempty" jsonschema:"leave out memories scoring below this; scores are comparable across queries (docs/recall.md)"`
}

// RecallOut is the recall tool's result.
type RecallOut struct {
	Query   string   `json:"query"`
	Results []Memory `json:"results" jsonschema:"best first"`
	Syncing *Syncing `json:"syncing,omitempty" jsonschema:"present while the node is still receiving its peers' memories: results may be incomplete"`
}

// Syncing is a catch-up in progress, as a result reports it.
type Syncing struct {
	Received int64 `json:"received" jsonschema:"memories received since the catch-up began"`
	Expected int64 `json:"expected" jsonschema:"about how many it will receive in all"`
	Peers    int   `json:"peers" jsonschema:"peers it is catching up from"`
}

// syncingOf is a catch-up in progress as a result reports it, nil when
// none runs.
func syncingOf(p *node.SyncProgress) *Syncing {
	if p == nil || !p.Syncing {
		return nil
	}
	return &Syncing{Received: p.Received, Expected: p.Expected, Peers: p.Peers}
}

// syncNote is the line a result's text leads with while syncing.
func syncNote(sy *Syncing) string {
	if sy == nil {
		return ""
	}
	return fmt.Sprintf("Note: still catching up with %s (%d of about %d memories received); results may be incomplete.\n",
		plural(sy.Peers, "peer"), sy.Received, sy.Expected)
}

func (s *server) recall(ctx context.Context, _ *mcp.CallToolRequest, in recallIn) (*mcp.CallToolResult, RecallOut, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	limit := orDefault(in.Limit, defaultRecall)
	var authors []string
	if in.Author != "" {
		ids, err := s.resolveAuthor(ctx, in.Author)
		if err != nil {
			return nil, RecallOut{}, fmt.Errorf("recall: author: %w", err)
		}
		authors = ids
	}
	now := time.Now()
	var since, until int64
	if in.Since != "" {
		t, err := parseTime(in.Since, now)
		if err != nil {
			return nil, RecallOut{}, fmt.Errorf("recall: since: %w", err)
		}
		since = t.UnixMilli()
	}
	if in.Until != "" {
		t, err := parseTime(in.Until, now)
		if err != nil {
			return nil, RecallOut{}, fmt.Errorf("recall: until: %w", err)
		}
		until = t.UnixMilli()
	}
	// The socket's recall ranks and bounds; the filters apply to its best
	// filterWidth×limit hits, which a filter then narrows.
	fetch := limit
	filtered := len(authors) > 0 || since > 0 || until > 0
	if filtered {
		fetch = min(limit*filterWidth, node.MaxRecall)
	}
	var raw []byte
	err := s.d.do(ctx, func(c *ipc.Client) (err error) {
		raw, err = c.RecallRaw(ctx, in.Query, node.RecallOptions{Limit: fetch, MinScore: in.MinScore})
		return err
	})
	if err != nil {
		return nil, RecallOut{}, fmt.Errorf("recall: %w", err)
	}
	r, err := decodeRecall(raw)
	if err != nil {
		return nil, RecallOut{}, fmt.Errorf("recall: %w", err)
	}
	hits := r.Results
	if filtered {
		hits = slices.DeleteFunc(hits, func(h recallHit) bool {
			return (len(authors) > 0 && !slices.Contains(authors, strings.ToLower(h.CreatedBy))) ||
				(since > 0 && h.CreatedAt < since) || (until > 0 && h.CreatedAt >= until)
		})
	}
	hits = hits[:min(len(hits), limit)]
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.CreatedBy
	}
	res, out := recallResult(in.Query, hits, r.Sync, s.names.names(ctx, s.d, ids))
	return res, out, nil
}

// recallReply is ipc.RecallReply as the recall tool decodes it: each hit's
// fields straight into the Fields it returns.
type recallReply struct {
	Results []recallHit        `json:"results"`
	Sync    *node.SyncProgress `json:"sync,omitempty"`
}

// recallHit is node.RecallHit with its fields as Fields.
type recallHit struct {
	Key       string  `json:"key"`
	CreatedBy string  `json:"createdBy"`
	CreatedAt int64   `json:"createdAt"`
	Group     string  `json:"group"`
	Fields    Fields  `json:"fields"`
	Score     float64 `json:"score"`
}

// decodeRecall decodes the socket's recall reply (ipc.Client.RecallRaw).
func decodeRecall(raw []byte) (recallReply, error) {
	var r recallReply
	if err := segjson.Unmarshal(raw, &r); err != nil {
		return recallReply{}, fmt.Errorf("the daemon sent an unreadable recall reply: %w", err)
	}
	for i := range r.Results {
		for _, f := range r.Results[i].Fields.all() {
			if f.Text == "" {
				f.Text = cmb.Neutral // a field the daemon left out, as fieldsOf reads it
			}
		}
	}
	return r, nil
}

// recallResult is the recall tool's result for the hits kept, best first.
func recallResult(query string, hits []recallHit, sync *node.SyncProgress, names map[string]string) (*mcp.CallToolResult, RecallOut) {
	out := RecallOut{Query: query, Results: make([]Memory, len(hits))}
	for i := range hits {
		h := &hits[i]
		out.Results[i] = Memory{Key: h.Key, Author: h.CreatedBy, AuthorName: names[h.CreatedBy], Time: formatTime(h.CreatedAt),
			Group: h.Group, Fields: h.Fields, Score: &h.Score}
	}
	out.Syncing = syncingOf(sync)
	note := syncNote(out.Syncing)
	if len(hits) == 0 {
		return textResult(note + fmt.Sprintf("No memory matches %q.\n", query)), out
	}
	return textResult(note + renderList(fmt.Sprintf("%s for %q, best first:", plural(len(hits), "memory"), query), out.Results)), out
}

// filterWidth is how many hits per wanted result a filtered recall ranks.
const filterWidth = 10

type keyIn struct {
	Key string `json:"key" jsonschema:"a memory's key or a unique prefix of it"`
}

// GetOut is the get tool's result.
type GetOut struct {
	Memory   Memory `json:"memory"`
	Source   string `json:"source" jsonschema:"local when authored here, else the nodeId it arrived from"`
	StoredAt string `json:"storedAt" jsonschema:"when this node stored it, RFC 3339 UTC"`
	Directed bool   `json:"directed" jsonschema:"true when it was sealed for one member"`
	// KeyConfirmed is false when the author's key is known only from gossip.
	KeyConfirmed bool `json:"keyConfirmed" jsonschema:"false when the author's key is known only from gossip (lower provenance)"`
}

func (s *server) get(ctx context.Context, _ *mcp.CallToolRequest, in keyIn) (*mcp.CallToolResult, GetOut, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	out, err := s.getMemory(ctx, in.Key)
	if err != nil {
		return nil, GetOut{}, fmt.Errorf("get: %w", err)
	}
	var b strings.Builder
	writeMemory(&b, "  ", &out.Memory)
	fmt.Fprintf(&b, "  held: source %s, stored %s", out.Source, out.StoredAt)
	if out.Directed {
		b.WriteString(", sealed for one member")
	}
	if !out.KeyConfirmed {
		b.WriteString(", author key known only from gossip")
	}
	b.WriteByte('\n')
	return textResult(b.String()), out, nil
}

func (s *server) getMemory(ctx context.Context, ref string) (GetOut, error) {
	var g ipc.GetReply
	err := s.d.do(ctx, func(c *ipc.Client) (err error) {
		g, err = c.Get(ctx, strings.TrimSpace(ref))
		return err
	})
	if err != nil {
		return GetOut{}, err
	}
	rec, err := cmb.Decode(g.CMB)
	if err != nil {
		return GetOut{}, fmt.Errorf("the daemon sent a record that does not decode: %w", err)
	}
	names := s.names.names(ctx, s.d, []string{rec.CreatedBy})
	return GetOut{Memory: memoryOfRecord(rec, names), Source: g.Source, StoredAt: formatTime(g.StoredAt),
		Directed: g.Directed, KeyConfirmed: g.KeyConfirmed}, nil
}

type threadIn struct {
	Key   string `json:"key" jsonschema:"a memory's key or a unique prefix of it"`
	Limit int    `json:"limit,omitempty" jsonschema:"how many memories the thread holds at most"`
}

// ThreadMember is one memory of a thread.
type ThreadMember struct {
	Role   string `json:"role" jsonschema:"ancestor, focal (the memory asked about) or descendant"`
	Depth  int    `json:"depth" jsonschema:"lineage hops from the focal memory"`
	Memory Memory `json:"memory"`
}

// ThreadOut is the thread tool's result.
type ThreadOut struct {
	Key     string         `json:"key" jsonschema:"the focal memory's key"`
	Members []ThreadMember `json:"members" jsonschema:"ancestors, the focal memory, descendants; each part oldest first"`
}

func (s *server) thread(ctx context.Context, _ *mcp.CallToolRequest, in threadIn) (*mcp.CallToolResult, ThreadOut, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	var r ipc.ThreadReply
	err := s.d.do(ctx, func(c *ipc.Client) (err error) {
		r, err = c.Thread(ctx, strings.TrimSpace(in.Key), orDefault(in.Limit, defaultThread))
		return err
	})
	if err != nil {
		return nil, ThreadOut{}, fmt.Errorf("thread: %w", err)
	}
	ids := make([]string, len(r.Members))
	for i, m := range r.Members {
		ids[i] = m.CreatedBy
	}
	names := s.names.names(ctx, s.d, ids)
	out := ThreadOut{Key: r.Key, Members: make([]ThreadMember, len(r.Members))}
	var b strings.Builder
	fmt.Fprintf(&b, "Thread of %s around %s (ancestors, the memory, descendants; oldest first):\n", plural(len(r.Members), "memory"), r.Key)
	for i, m := range r.Members {
		out.Members[i] = ThreadMember{Role: m.Role, Depth: m.Depth, Memory: memoryOf(m.Memory, names)}
		fmt.Fprintf(&b, "%d. [%s] ", i+1, m.Role)
		writeMemory(&b, "   ", &out.Members[i].Memory)
	}
	return textResult(b.String()), out, nil
}

type recentIn struct {
	Limit  int    `json:"limit,omitempty" jsonschema:"how many memories at most"`
	Author string `json:"author,omitempty" jsonschema:"only memories by this author: a nodeId or a name"`
	Since  string `json:"since,omitempty" jsonschema:"only memories created at or after this time"`
}

// RecentOut is the recent tool's result.
type RecentOut struct {
	Results []Memory `json:"results" jsonschema:"newest first"`
}

func (s *server) recent(ctx context.Context, _ *mcp.CallToolRequest, in recentIn) (*mcp.CallToolResult, RecentOut, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	a := ipc.RecentArgs{Limit: orDefault(in.Limit, defaultRecent)}
	if in.Since != "" {
		t, err := parseTime(in.Since, time.Now())
		if err != nil {
			return nil, RecentOut{}, fmt.Errorf("recent: since: %w", err)
		}
		a.Since = max(t.UnixMilli(), 1)
	}
	authors := []string{""}
	if in.Author != "" {
		ids, err := s.resolveAuthor(ctx, in.Author)
		if err != nil {
			return nil, RecentOut{}, fmt.Errorf("recent: author: %w", err)
		}
		authors = ids
	}
	var all []node.Memory
	for _, id := range authors {
		a.Author = id
		var ms []node.Memory
		err := s.d.do(ctx, func(c *ipc.Client) (err error) {
			ms, err = c.Recent(ctx, a)
			return err
		})
		if err != nil {
			return nil, RecentOut{}, fmt.Errorf("recent: %w", err)
		}
		all = append(all, ms...)
	}
	// Several authors of one name: merge their lists, newest first.
	slices.SortStableFunc(all, func(x, y node.Memory) int { return int(y.CreatedAt - x.CreatedAt) })
	all = all[:min(len(all), a.Limit)]
	out := RecentOut{Results: s.memories(ctx, all)}
	if len(all) == 0 {
		return textResult("No memories yet.\n"), out, nil
	}
	return textResult(renderList(fmt.Sprintf("The newest %s, newest first:", plural(len(all), "memory")), out.Results)), out, nil
}

func (s *server) memories(ctx context.Context, ms []node.Memory) []Memory {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.CreatedBy
	}
	names := s.names.names(ctx, s.d, ids)
	out := make([]Memory, len(ms))
	for i, m := range ms {
		out[i] = memoryOf(m, names)
	}
	return out
}

type noArgs struct{}

// Peer is one group member.
type Peer struct {
	NodeID string   `json:"nodeId"`
	Name   string   `json:"name"`
	PeerID string   `json:"peerId" jsonschema:"its libp2p peer id"`
	Addrs  []string `json:"addrs" jsonschema:"its multiaddrs"`
}

// PeersOut is the peers tool's result.
type PeersOut struct {
	Peers []Peer `json:"peers"`
}

func (s *server) peers(ctx context.Context, _ *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, PeersOut, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	ps, err := s.peerList(ctx)
	if err != nil {
		return nil, PeersOut{}, fmt.Errorf("peers: %w", err)
	}
	out := PeersOut{Peers: make([]Peer, len(ps))}
	var b strings.Builder
	fmt.Fprintf(&b, "Connected to %s in the group:\n", plural(len(ps), "peer"))
	for i, p := range ps {
		addrs := p.Addrs
		if addrs == nil {
			addrs = []string{}
		}
		out.Peers[i] = Peer{NodeID: p.NodeID, Name: p.Name, PeerID: p.PeerID, Addrs: addrs}
		fmt.Fprintf(&b, "- %s (nodeId %s)\n", p.Name, p.NodeID)
	}
	return textResult(b.String()), out, nil
}

func (s *server) peerList(ctx context.Context) ([]node.PeerInfo, error) {
	var ps []node.PeerInfo
	err := s.d.do(ctx, func(c *ipc.Client) (err error) {
		ps, err = c.Peers(ctx)
		return err
	})
	for _, p := range ps {
		s.names.put(p.NodeID, p.Name)
	}
	return ps, err
}

// StatusOut is the status tool's result.
type StatusOut struct {
	NodeID      string   `json:"nodeId" jsonschema:"this node's id: the author of what it remembers"`
	Name        string   `json:"name"`
	Group       string   `json:"group"`
	PeerID      string   `json:"peerId"`
	Addrs       []string `json:"addrs"`
	Peers       int      `json:"peers" jsonschema:"peers connected now"`
	Memories    int      `json:"memories" jsonschema:"memories held"`
	Quarantined int      `json:"quarantined" jsonschema:"memories held but not surfaced: admitted under an author key a handshake replaced"`
	Socket      string   `json:"socket" jsonschema:"the daemon socket this server talks to"`
	Syncing     *Syncing `json:"syncing,omitempty" jsonschema:"present while the node is still receiving its peers' memories"`
}

func (s *server) status(ctx context.Context, _ *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, StatusOut, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	st, err := s.statusOf(ctx)
	if err != nil {
		return nil, StatusOut{}, fmt.Errorf("status: %w", err)
	}
	addrs := st.Addrs
	if addrs == nil {
		addrs = []string{}
	}
	out := StatusOut{NodeID: st.NodeID, Name: st.Name, Group: st.Group, PeerID: st.PeerID, Addrs: addrs,
		Peers: st.Peers, Memories: st.CMBs, Quarantined: len(st.Quarantined), Socket: s.d.path}
	text := fmt.Sprintf("Node %s (nodeId %s) in group %q: %s connected, %s held.\n",
		st.Name, st.NodeID, st.Group, plural(st.Peers, "peer"), plural(st.CMBs, "memory"))
	if sp := st.Sync; sp != nil && sp.Syncing {
		out.Syncing = &Syncing{Received: sp.Received, Expected: sp.Expected, Peers: sp.Peers}
		text += syncNote(out.Syncing)
	}
	return textResult(text), out, nil
}

func (s *server) statusOf(ctx context.Context) (ipc.StatusReply, error) {
	var st ipc.StatusReply
	err := s.d.do(ctx, func(c *ipc.Client) (err error) {
		st, err = c.Status(ctx)
		return err
	})
	if err == nil {
		s.names.put(st.NodeID, st.Name)
	}
	return st, err
}

// resolveKey turns a key or unique prefix into a full key through the
// daemon (node.ResolveKey behind `get`).
func (s *server) resolveKey(ctx context.Context, ref string) (string, error) {
	g, err := s.getMemory(ctx, ref)
	if err != nil {
		return "", err
	}
	return g.Memory.Key, nil
}

// resolveAuthor turns an author given as a nodeId or a name into the
// nodeIds it may stand for: this node's own name, a peer's, or a name
// cached from earlier results.
func (s *server) resolveAuthor(ctx context.Context, who string) ([]string, error) {
	who = strings.TrimSpace(who)
	if cmb.ValidateNodeID(who) == nil {
		return []string{strings.ToLower(who)}, nil
	}
	ids, known, err := s.idsNamed(ctx, who)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("no group member is named %q; known: %s", cmb.Truncate(who, 64), strings.Join(known, ", "))
	}
	return ids, nil
}

// resolveMember is resolveAuthor for one recipient: a name two members
// share is refused rather than guessed.
func (s *server) resolveMember(ctx context.Context, who string) (string, error) {
	ids, err := s.resolveAuthor(ctx, who)
	if err != nil {
		return "", err
	}
	if len(ids) > 1 {
		return "", fmt.Errorf("%q names %d members (%s): give a nodeId", cmb.Truncate(who, 64), len(ids), strings.Join(ids, ", "))
	}
	return ids[0], nil
}

// idsNamed lists the nodeIds going by name (case-insensitively), and every
// name known, for the error when none does.
func (s *server) idsNamed(ctx context.Context, name string) (ids, known []string, err error) {
	st, err := s.statusOf(ctx)
	if err != nil {
		return nil, nil, err
	}
	ps, err := s.peerList(ctx)
	if err != nil {
		return nil, nil, err
	}
	add := func(id, n string) {
		id = strings.ToLower(id)
		if strings.EqualFold(n, name) && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
		known = append(known, fmt.Sprintf("%s (%s)", n, id))
	}
	add(st.NodeID, st.Name)
	for _, p := range ps {
		add(p.NodeID, p.Name)
	}
	for _, id := range s.names.idsFor(name) {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, known, nil
}

func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// orDefault is v, or def when v is zero (the schema's default, for hosts that
// leave it out).
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
