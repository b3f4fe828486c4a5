package ipc

import (
	"context"
	"time"

	"github.com/cmbnode/cmbnode/node"
)

// The browsing requests: recent, thread and authors, and the key prefixes
// get, lineage and thread accept. Each goes through one node method.

// resolvedKey reads the required member "key", a full key or a unique key
// prefix (node.ResolveKey).
func (c *conn) resolvedKey(ctx context.Context, m message) (string, error) {
	ref, err := requiredKey(m)
	if err != nil {
		return "", err
	}
	return c.srv.node.ResolveKey(ctx, ref)
}

// RecentArgs is a recent request.
type RecentArgs struct {
	Author string `json:"author,omitempty"`
	Since  int64  `json:"since,omitempty"` // Unix ms, inclusive
	Limit  int    `json:"limit,omitempty"`
}

func (c *conn) recent(ctx context.Context, m message) (any, error) {
	var a RecentArgs
	if err := optional(m, "author", &a.Author); err != nil {
		return nil, err
	}
	if err := optional(m, "since", &a.Since); err != nil {
		return nil, err
	}
	if err := optional(m, "limit", &a.Limit); err != nil {
		return nil, err
	}
	if a.Limit < 0 || a.Since < 0 {
		return nil, Errorf(CodeBadRequest, "limit and since must not be negative")
	}
	o := node.RecentOptions{Author: a.Author, Limit: a.Limit}
	if a.Since > 0 {
		o.Since = time.UnixMilli(a.Since)
	}
	mem, err := c.srv.node.Recent(ctx, o)
	if err != nil {
		return nil, err
	}
	return RecentReply{Results: mem}, nil
}

// RecentReply is a recent result: newest first.
type RecentReply struct {
	Results []node.Memory `json:"results"`
}

func (c *conn) thread(ctx context.Context, m message) (any, error) {
	key, err := c.resolvedKey(ctx, m)
	if err != nil {
		return nil, err
	}
	limit, err := optionalCount(m, "limit")
	if err != nil {
		return nil, err
	}
	members, err := c.srv.node.Thread(ctx, key, limit)
	if err != nil {
		return nil, err
	}
	return ThreadReply{Key: key, Members: members}, nil
}

// ThreadReply is a thread result: ancestors, the record, descendants.
type ThreadReply struct {
	Key     string              `json:"key"`
	Members []node.ThreadMember `json:"members"`
}

func (c *conn) authors(ctx context.Context, m message) (any, error) {
	var ids []string
	if _, ok := m["nodeIds"]; !ok || optional(m, "nodeIds", &ids) != nil {
		return nil, Errorf(CodeBadRequest, "authors needs \"nodeIds\", an array of strings")
	}
	names, err := c.srv.node.AuthorNames(ctx, ids)
	if err != nil {
		return nil, err
	}
	return AuthorsReply{Names: names}, nil
}

// AuthorsReply maps the nodeIds asked about to the names they go by here;
// those with no known name are absent.
type AuthorsReply struct {
	Names map[string]string `json:"names"`
}

// Recent lists the newest records (newest first).
func (c *Client) Recent(ctx context.Context, a RecentArgs) ([]node.Memory, error) {
	var r RecentReply
	return r.Results, c.call(ctx, TypeRecent, a, &r)
}

// Thread returns a record's thread; key may be a unique prefix. limit 0
// takes the node's default.
func (c *Client) Thread(ctx context.Context, key string, limit int) (ThreadReply, error) {
	var r ThreadReply
	return r, c.call(ctx, TypeThread, map[string]any{"key": key, "limit": limit}, &r)
}

// AuthorNames maps nodeIds to the names they go by on the daemon's node.
func (c *Client) AuthorNames(ctx context.Context, nodeIDs []string) (map[string]string, error) {
	var r AuthorsReply
	return r.Names, c.call(ctx, TypeAuthors, map[string]any{"nodeIds": nodeIDs}, &r)
}
