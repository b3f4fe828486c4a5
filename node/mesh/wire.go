package mesh

import (
	"log/slog"

	"cmbnode/node"
	"cmbnode/node/config"
)

// ConfigFrom maps the daemon's settings onto a mesh Config. The group comes
// from the node (opened with config.Group), so the two cannot disagree.
func ConfigFrom(n *node.Node, c config.Config, log *slog.Logger) Config {
	return Config{Node: n, Listen: c.Listen, Bootstrap: c.Bootstrap, MDNS: c.MDNS, Logger: log}
}
