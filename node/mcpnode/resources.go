package mcpnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cmbnode/cmbnode/node/ipc"
)

// Resource addresses.
const (
	// RecentURI is the newest memories; subscribers hear when it changes.
	RecentURI = "cmbnode://recent"
	// MemoryTemplate is one memory by key (or unique key prefix).
	MemoryTemplate = "cmb://{key}"
	memoryScheme   = "cmb://"
	jsonMIME       = "application/json"
)

func (s *server) addResources() {
	s.srv.AddResource(&mcp.Resource{
		URI: RecentURI, Name: "recent", Title: "The newest memories",
		Description: fmt.Sprintf("The %d newest memories this node holds, newest first, as JSON. Subscribe to hear when a group member's memory arrives.", defaultRecent),
		MIMEType:    jsonMIME,
	}, s.readRecent)
	s.srv.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: MemoryTemplate, Name: "memory", Title: "One memory",
		Description: "One memory as JSON, by its key or a unique key prefix: cmb://cmb1-…",
		MIMEType:    jsonMIME,
	}, s.readMemory)
}

func (s *server) readRecent(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	_, out, err := s.recent(ctx, nil, recentIn{})
	if err != nil {
		return nil, readErr(err)
	}
	return jsonContents(req.Params.URI, out)
}

func (s *server) readMemory(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	uri := req.Params.URI
	ref, ok := strings.CutPrefix(uri, memoryScheme)
	if !ok || ref == "" || len(ref) > MaxRefChars {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	out, err := s.getMemory(ctx, ref)
	var ie *ipc.Error
	if errors.As(err, &ie) && ie.Code == ipc.CodeNotFound {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if err != nil {
		return nil, readErr(err)
	}
	return jsonContents(uri, out)
}

// readErr maps a failed read onto JSON-RPC: what the daemon refused (an
// ambiguous prefix, a malformed key) is the caller's invalid params;
// anything else, a missing daemon included, is an internal error whose
// message says what to do.
func readErr(err error) error {
	var ie *ipc.Error
	if errors.As(err, &ie) && ie.Code == ipc.CodeBadRequest {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: ie.Message}
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
}

func jsonContents(uri string, v any) (*mcp.ReadResourceResult, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", uri, err)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: jsonMIME, Text: string(b)}}}, nil
}

// subscribe admits subscriptions to the resources that change: only
// RecentURI (a memory never changes: its key is its content).
func (s *server) subscribe(_ context.Context, req *mcp.SubscribeRequest) error {
	if req.Params.URI != RecentURI {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: fmt.Sprintf("%s cannot be subscribed to: only %s changes (a memory's key is its content)", req.Params.URI, RecentURI)}
	}
	return nil
}

func (s *server) unsubscribe(context.Context, *mcp.UnsubscribeRequest) error { return nil }

// recentChanged tells RecentURI's subscribers that it changed.
func (s *server) recentChanged(ctx context.Context) {
	if err := s.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: RecentURI}); err != nil {
		s.log.Warn("resource update notification failed", "uri", RecentURI, "err", err)
	}
}

// watch keeps a listening connection to the daemon for as long as ctx
// lasts, redialling after it breaks, and turns its events into
// notifications: a peer's memory arriving (cmb-accepted) updates
// RecentURI; a peer joining teaches the name cache its name. It is a
// connection of its own, so a slow host never holds up tool calls.
func (s *server) watch(ctx context.Context) {
	backoff := s.opts.RedialMin
	for ctx.Err() == nil {
		c, err := ipc.Dial(ctx, s.d.path)
		if err == nil {
			lctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
			err = c.Listen(lctx)
			cancel()
			if err == nil {
				backoff = s.opts.RedialMin
				s.log.Debug("listening to the daemon for resource updates", "socket", s.d.path)
				s.relayEvents(ctx, c)
			}
			c.Close()
		}
		if err != nil {
			s.log.Debug("no daemon to listen to yet", "socket", s.d.path, "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, s.opts.RedialMax)
	}
}

func (s *server) relayEvents(ctx context.Context, c *ipc.Client) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-c.Events():
			if !ok {
				return
			}
			switch ev.Event {
			case "cmb-accepted":
				s.recentChanged(ctx)
			case "peer-joined":
				var p struct {
					NodeID string `json:"nodeId"`
					Name   string `json:"name"`
				}
				if json.Unmarshal(ev.Data, &p) == nil && p.NodeID != "" {
					s.names.put(p.NodeID, p.Name)
				}
			}
		}
	}
}
