package mesh

import (
	"context"
	"log/slog"

	"cmbnode/node"
	"cmbnode/node/config"
)

// ConfigFrom maps the daemon's settings onto a mesh Config. The group comes
// from the node (opened with config.Group), so the two cannot disagree.
func ConfigFrom(n *node.Node, c config.Config, log *slog.Logger) Config {
	return Config{Node: n, Listen: c.Listen, Bootstrap: c.Bootstrap, MDNS: c.MDNS, Logger: log}
}

// StartAttached starts the mesh and attaches it to the node: what the
// daemon's StartMesh hook does. The caller closes the returned mesh and then
// detaches it (n.AttachMesh(nil)).
func StartAttached(ctx context.Context, n *node.Node, c config.Config, log *slog.Logger) (*Mesh, error) {
	m, err := Start(ctx, ConfigFrom(n, c, log))
	if err != nil {
		return nil, err
	}
	n.AttachMesh(m)
	return m, nil
}
