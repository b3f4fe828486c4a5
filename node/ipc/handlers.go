package ipc

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/events"
)

// Node is what the socket serves; *node.Node implements it.
type Node interface {
	Remember(ctx context.Context, in node.RememberInput) (node.Result, error)
	Publish(ctx context.Context, rec *cmb.Record, pub ed25519.PublicKey) (node.Result, error)
	RecallWith(ctx context.Context, query string, o node.RecallOptions) ([]node.RecallHit, error)
	Get(ctx context.Context, key string) (*node.Stored, error)
	Lineage(ctx context.Context, key string, depth int) (node.LineageResult, error)
	ResolveKey(ctx context.Context, ref string) (string, error)
	Recent(ctx context.Context, o node.RecentOptions) ([]node.Memory, error)
	Thread(ctx context.Context, key string, maxMembers int) ([]node.ThreadMember, error)
	AuthorNames(ctx context.Context, authors []string) (map[string]string, error)
	Status() node.Status
	Sync() node.SyncProgress
	Peers() []node.PeerInfo
	Events() *events.Bus
	Head() (cursor string, seq uint64)
	ReplayAfter(cursor string) (*node.Replay, error)
	Export(ctx context.Context, q node.ExportQuery) (node.ExportPage, error)
	Import(ctx context.Context, lines []node.ExportLine) (node.ImportResult, error)
	CheckStore(ctx context.Context) (node.CheckResult, error)
	Forget(ctx context.Context, ref string) (node.ForgetResult, error)
	Conflicts(ctx context.Context) ([]node.Conflict, error)
	Trust(ctx context.Context, nodeID string, key ed25519.PublicKey, x []byte) (node.TrustResult, error)
	Connect(ctx context.Context, addr string) (node.PeerInfo, error)
}

// CGPHandler answers the socket's `query` and `verify` requests with the CGP
// payloads carried verbatim (a ContextQuery in, a ContextQueryResult out; a
// VerifyRequest in, a VerifyResponse out). Return an *Error to choose the
// code the agent sees (e.g. the CGP engine's own bad_request); any other
// error is mapped like the node's (ErrBadRequest → bad_request, …, else
// internal). Without a handler both requests reply `unavailable`.
type CGPHandler interface {
	Query(ctx context.Context, query json.RawMessage) (result json.RawMessage, err error)
	Verify(ctx context.Context, request json.RawMessage) (response json.RawMessage, err error)
}

// message is one decoded request: its members, raw.
type message map[string]json.RawMessage

// codeOf maps an error onto the contract's codes.
func codeOf(err error) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, node.ErrCursorExpired):
		return &Error{Code: CodeCursorExpired, Message: err.Error()}
	case errors.Is(err, node.ErrDiskFull):
		return &Error{Code: CodeDiskFull, Message: err.Error()}
	case errors.Is(err, node.ErrBadRequest):
		return &Error{Code: CodeBadRequest, Message: err.Error()}
	case errors.Is(err, node.ErrRejected):
		return &Error{Code: CodeRejected, Message: err.Error()}
	case cmb.ReasonOf(err) != "":
		// A cmb validation error reaching us is the record failing a check.
		return &Error{Code: CodeRejected, Message: err.Error()}
	case errors.Is(err, node.ErrNotFound):
		return &Error{Code: CodeNotFound, Message: err.Error()}
	case errors.Is(err, node.ErrUnavailable), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: CodeUnavailable, Message: err.Error()}
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

// handle answers one request; the reply is nil for listen, which writes its
// own reply before its events.
func (c *conn) handle(ctx context.Context, typ string, id json.RawMessage, m message) []byte {
	payload, err := c.dispatch(ctx, typ, id, m)
	if err != nil {
		e := codeOf(err)
		if e.Code == CodeInternal {
			c.srv.log.Error("socket request failed", "type", typ, "err", err)
		}
		return encodeError(typ, id, e)
	}
	if payload == nil {
		return nil
	}
	b, err := encodeResult(typ, id, payload)
	if err != nil {
		c.srv.log.Error("socket reply failed", "type", typ, "err", err)
		return encodeError(typ, id, &Error{Code: CodeInternal, Message: err.Error()})
	}
	return b
}

func (c *conn) dispatch(ctx context.Context, typ string, id json.RawMessage, m message) (any, error) {
	n := c.srv.node
	switch typ {
	case TypeRemember:
		in, err := decodeRemember(m)
		if err != nil {
			return nil, err
		}
		return n.Remember(ctx, in)
	case TypePublish:
		rec, pub, err := decodePublish(m)
		if err != nil {
			return nil, err
		}
		return n.Publish(ctx, rec, pub)
	case TypeRecall:
		var q string
		if err := optional(m, "query", &q); err != nil {
			return nil, err
		}
		limit, err := optionalCount(m, "limit")
		if err != nil {
			return nil, err
		}
		var minScore float64
		if err := optional(m, "min_score", &minScore); err != nil {
			return nil, err
		}
		if minScore < 0 || minScore > 1 {
			return nil, Errorf(CodeBadRequest, "min_score must be between 0 and 1")
		}
		hits, err := n.RecallWith(ctx, q, node.RecallOptions{Limit: limit, MinScore: minScore})
		if err != nil {
			return nil, err
		}
		if hits == nil {
			hits = []node.RecallHit{}
		}
		r := RecallReply{Results: hits}
		if p := n.Sync(); p.Syncing {
			r.Sync = &p
		}
		return r, nil
	case TypeGet:
		key, err := c.resolvedKey(ctx, m)
		if err != nil {
			return nil, err
		}
		s, err := n.Get(ctx, key)
		if err != nil {
			return nil, err
		}
		as := make([]AssertionReply, len(s.Assertions))
		for i, a := range s.Assertions {
			as[i] = AssertionReply{CreatedBy: a.CreatedBy, CreatedAt: a.CreatedAt, CMB: a.CMB}
		}
		return GetReply{CMB: s.Raw, Source: s.Source, StoredAt: s.StoredAt.UnixMilli(), Directed: s.Directed, KeyConfirmed: s.KeyConfirmed, Assertions: as}, nil
	case TypeForget:
		// The key is resolved by the node (a unique prefix works), which
		// forgets only records it holds.
		ref, err := requiredKey(m)
		if err != nil {
			return nil, err
		}
		return n.Forget(ctx, ref)
	case TypeLineage:
		key, err := c.resolvedKey(ctx, m)
		if err != nil {
			return nil, err
		}
		depth, err := optionalCount(m, "depth")
		if err != nil {
			return nil, err
		}
		return n.Lineage(ctx, key, depth)
	case TypeQuery, TypeVerify:
		return c.srv.cgp(ctx, typ, m)
	case TypeStatus:
		conflicts, err := n.Conflicts(ctx)
		if err != nil {
			return nil, err
		}
		return statusReply{Status: n.Status(), Conflicts: conflicts, Clients: c.srv.clients.Load(), ClientsDropped: c.srv.dropped.Load()}, nil
	case TypePeers:
		conflicts, err := n.Conflicts(ctx)
		if err != nil {
			return nil, err
		}
		return struct {
			Peers     []node.PeerInfo `json:"peers"`
			Conflicts []node.Conflict `json:"conflicts"`
		}{n.Peers(), conflicts}, nil
	case TypeTrust:
		var nodeID, key string
		if json.Unmarshal(m["nodeId"], &nodeID) != nil || json.Unmarshal(m["key"], &key) != nil || nodeID == "" || key == "" {
			return nil, Errorf(CodeBadRequest, "trust needs \"nodeId\" and \"key\" (the Ed25519 key to pin, base64url, as status and peers list it)")
		}
		pub, err := cmb.ParsePublicKey(key)
		if err != nil {
			return nil, Errorf(CodeBadRequest, "key: %v", err)
		}
		return n.Trust(ctx, nodeID, pub, nil)
	case TypeListen:
		var after *string
		if raw, ok := m["after"]; ok && (json.Unmarshal(raw, &after) != nil || after == nil) {
			return nil, Errorf(CodeBadRequest, "after must be a string: the cursor of the last cmb-accepted event read")
		}
		return nil, c.listen(typ, id, after)
	case TypeRecent:
		return c.recent(ctx, m)
	case TypeThread:
		return c.thread(ctx, m)
	case TypeAuthors:
		return c.authors(ctx, m)
	case TypeExport:
		var q node.ExportQuery
		for name, v := range map[string]any{"since": &q.Since, "author": &q.Author, "after": &q.After, "limit": &q.Limit} {
			if err := optional(m, name, v); err != nil {
				return nil, err
			}
		}
		if q.Since < 0 || q.Limit < 0 {
			return nil, Errorf(CodeBadRequest, "since and limit must not be negative")
		}
		return n.Export(ctx, q)
	case TypeImport:
		var lines []node.ExportLine
		if raw, ok := m["records"]; !ok || len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &lines) != nil {
			return nil, Errorf(CodeBadRequest, "import needs \"records\": an array of {\"cmb\":{…},\"publicKey\":…} objects, as export writes them")
		}
		return n.Import(ctx, lines)
	case TypeCheck:
		return n.CheckStore(ctx)
	case TypeConnect:
		var addr string
		if err := optional(m, "addr", &addr); err != nil {
			return nil, err
		}
		if addr == "" {
			return nil, Errorf(CodeBadRequest, "missing member \"addr\" (a multiaddr ending in /p2p/<peerId>)")
		}
		p, err := n.Connect(ctx, addr)
		if err != nil {
			return nil, err
		}
		return struct {
			Peer node.PeerInfo `json:"peer"`
		}{p}, nil
	}
	return nil, Errorf(CodeUnknownRequest, "unknown request type %q; known: remember, publish, recall, get, lineage, recent, thread, authors, query, verify, status, peers, listen, export, import, check, forget, trust, connect", typ)
}

// statusReply is node.Status plus the socket's own numbers.
type statusReply struct {
	node.Status
	// Conflicts are nodeIds two keys claim (docs/mesh.md); `trust` ends one.
	Conflicts      []node.Conflict `json:"conflicts"`
	Clients        int64           `json:"socketClients"`
	ClientsDropped int64           `json:"socketClientsDropped"`
}

func (s *Server) cgp(ctx context.Context, typ string, m message) (any, error) {
	member, out := "query", "result"
	if typ == TypeVerify {
		member, out = "request", "response"
	}
	raw, ok := m[member]
	if !ok || len(raw) == 0 || raw[0] != '{' {
		return nil, Errorf(CodeBadRequest, "%s needs a %q object", typ, member)
	}
	if s.opts.CGP == nil {
		return nil, Errorf(CodeUnavailable, "Context Graph queries are not available in this daemon build")
	}
	var res json.RawMessage
	var err error
	if typ == TypeQuery {
		res, err = s.opts.CGP.Query(ctx, raw)
	} else {
		res, err = s.opts.CGP.Verify(ctx, raw)
	}
	if err != nil {
		return nil, err
	}
	if !json.Valid(res) {
		return nil, fmt.Errorf("CGP %s handler returned invalid JSON", typ)
	}
	return map[string]json.RawMessage{out: res}, nil
}

// optional decodes member name into v when present and not null.
func optional(m message, name string, v any) error {
	raw, ok := m[name]
	if !ok || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return Errorf(CodeBadRequest, "%s: %s", name, typeName(v))
	}
	return nil
}

// optionalCount is optional for a member that counts something (a limit,
// a depth): an integer, 0 when absent, never negative.
func optionalCount(m message, name string) (int, error) {
	var n int
	if err := optional(m, name, &n); err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, Errorf(CodeBadRequest, "%s must not be negative", name)
	}
	return n, nil
}

func typeName(v any) string {
	switch v.(type) {
	case *string:
		return "must be a string"
	case *int:
		return "must be an integer"
	}
	return "has the wrong type"
}

func requiredKey(m message) (string, error) {
	var key string
	if err := optional(m, "key", &key); err != nil {
		return "", err
	}
	if key == "" {
		return "", Errorf(CodeBadRequest, "missing member \"key\"")
	}
	return key, nil
}

// decodeRemember accepts the contract's remember and the reference runtime's
// (categories for fields, {key} objects for parents).
func decodeRemember(m message) (node.RememberInput, error) {
	var in node.RememberInput
	raw, hasFields := m["fields"]
	if cat, ok := m["categories"]; ok {
		if hasFields {
			return in, Errorf(CodeBadRequest, "give fields or categories (its alias), not both")
		}
		raw, hasFields = cat, true
	}
	if !hasFields || string(raw) == "null" {
		return in, Errorf(CodeBadRequest, "missing member \"fields\" (or its alias \"categories\")")
	}
	f, err := decodeFields(raw)
	if err != nil {
		return in, err
	}
	in.Fields = f
	if in.Parents, err = decodeParents(m["parents"]); err != nil {
		return in, err
	}
	if err := optional(m, "to", &in.To); err != nil {
		return in, err
	}
	return in, nil
}

// decodeFields reads the fields as cmb.DecodeDraftFields does, and refuses
// any name or member it does not know so a typo is not silently a neutral
// field or an ignored value. raw is a member of a message, valid JSON
// (decodeMessage).
func decodeFields(raw json.RawMessage) (cmb.Fields, error) {
	f, extra, err := cmb.DecodeValidDraftFields(raw)
	if err != nil {
		return cmb.Fields{}, Errorf(CodeBadRequest, "%v", err)
	}
	if len(extra) > 0 {
		return cmb.Fields{}, Errorf(CodeBadRequest, "fields.%s is not a field; use %s", extra[0].Name, strings.Join(cmb.FieldNames[:], ", "))
	}
	for i := range f {
		if len(f[i].Extra) > 0 {
			return cmb.Fields{}, Errorf(CodeBadRequest, "fields.%s.%s is not a member: a field has text and vector, and mood also valence and arousal", cmb.FieldNames[i], f[i].Extra[0].Name)
		}
	}
	return *f, nil
}

// decodeParents reads an array of keys or {key} objects (or whole records,
// which carry key too).
func decodeParents(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var items []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, Errorf(CodeBadRequest, "parents must be an array of keys or {\"key\":…} objects")
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		var k string
		if len(it) > 0 && it[0] == '{' {
			var o struct {
				Key string `json:"key"`
			}
			if json.Unmarshal(it, &o) != nil || o.Key == "" {
				return nil, Errorf(CodeBadRequest, "parents[%d] has no string key", i)
			}
			k = o.Key
		} else if json.Unmarshal(it, &k) != nil || k == "" {
			return nil, Errorf(CodeBadRequest, "parents[%d] must be a key or a {\"key\":…} object", i)
		}
		out = append(out, k)
	}
	return out, nil
}

func decodePublish(m message) (*cmb.Record, ed25519.PublicKey, error) {
	raw, ok := m["cmb"]
	if !ok || len(raw) == 0 || raw[0] != '{' {
		return nil, nil, Errorf(CodeBadRequest, "missing member \"cmb\" (the signed record)")
	}
	var pk string
	if err := optional(m, "publicKey", &pk); err != nil {
		return nil, nil, err
	}
	if pk == "" {
		return nil, nil, Errorf(CodeBadRequest, "missing member \"publicKey\" (the author's Ed25519 key, base64url)")
	}
	pub, err := cmb.ParsePublicKey(pk)
	if err != nil {
		return nil, nil, Errorf(CodeBadRequest, "publicKey: %v", err)
	}
	rec, err := cmb.Decode(raw)
	if err != nil {
		return nil, nil, Errorf(CodeBadRequest, "cmb: %v", err)
	}
	return rec, pub, nil
}
