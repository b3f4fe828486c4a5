package mesh

import (
	"log/slog"

	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/config"
	"github.com/cmbnode/cmbnode/node/groupkey"
)

// ConfigFrom maps the daemon's settings onto a mesh Config. The group comes
// from the node (opened with config.Group), so the two cannot disagree;
// keys are its secrets, nil for a public group.
func ConfigFrom(n *node.Node, c config.Config, keys *groupkey.Keyring, log *slog.Logger) Config {
	return Config{
		Node: n, Keys: keys, Public: c.Public, Listen: c.Listen, Bootstrap: c.Bootstrap, MDNS: c.MDNS, PeerTarget: c.PeerTarget, Logger: log,
		// A taken default port falls back to a random one (with a WARN);
		// a port the operator chose is refused when taken.
		ListenFallback: config.IsDefaultListen(c.Listen),
		Relays:         c.Relays, RelayService: c.RelayService, Reachability: c.Reachability, NATPortMap: c.NATPortMap,
		PendingPerAuthor: c.Admission.PendingPerAuthor, PendingTTL: c.Admission.PendingTTL.Duration,
		PendingRetryMax: c.Admission.PendingRetryMax.Duration,
	}
}
