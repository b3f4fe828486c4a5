// Package config owns the daemon's settings: their defaults, the commented
// $CMBNODE_HOME/config.toml that `cmbnode init` writes, and loading it. Flags
// override the file; the file overrides the defaults.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/cmbnode/cmbnode/group"
	"github.com/cmbnode/cmbnode/node/cgp"
)

// FileName is the config file inside the home directory.
const FileName = "config.toml"

// ErrInsecure: the config file holds a secret (cgp_http_token) but group or
// others can access it.
var ErrInsecure = errors.New("config file permissions are too open")

// ErrExists: Write found a config file and left it alone.
var ErrExists = errors.New("already exists")

// Config is every setting the daemon reads.
type Config struct {
	// Group is the mesh group this node joins (MMP §5.8).
	Group string `toml:"group"`
	// Public makes the group name-only, as plain MMP nodes know it:
	// anyone who knows the name joins and reads. Off, the group is
	// private: its secret is in the home (groups/<group>/), peers prove
	// they hold it, and every CMB travels encrypted.
	Public bool `toml:"public"`
	// RotationGrace is how long, after a private group's secret is
	// rotated, peers holding only the previous secret are still admitted.
	RotationGrace Duration `toml:"rotation_grace"`
	// Listen are libp2p multiaddrs to listen on.
	Listen []string `toml:"listen"`
	// Bootstrap are peers (full multiaddrs with /p2p/) dialled and re-dialled.
	Bootstrap []string `toml:"bootstrap"`
	// Relays are members serving circuit relay v2 (full multiaddrs with
	// /p2p/): kept dialled, and a slot is reserved on them while this node
	// is not publicly reachable.
	Relays []string `toml:"relays"`
	// RelayService serves circuit relay v2 to the group's members only.
	RelayService bool `toml:"relay_service"`
	// Reachability is auto (AutoNAT decides), public or private.
	Reachability string `toml:"reachability"`
	// NATPortMap asks the router for a port mapping (UPnP / NAT-PMP).
	NATPortMap bool `toml:"nat_port_map"`
	// MDNS turns LAN discovery on.
	MDNS bool `toml:"mdns"`
	// PeerTarget is how many members this node keeps connected by its own
	// dials (peer-info, announcements, the peerstore, mDNS); bootstrap
	// peers, relays and `connect` peers come on top.
	PeerTarget int `toml:"peer_target"`
	// CGPHTTP is the address of the Context Graph Protocol HTTP binding; "" is off.
	CGPHTTP string `toml:"cgp_http"`
	// CGPHTTPToken is the bearer token the HTTP binding requires; "" means
	// the one minted into the home's cgp-http.token. A file setting it must
	// be private to its owner (Load checks).
	CGPHTTPToken string `toml:"cgp_http_token"`
	// Metrics is the address of the Prometheus endpoint; "" is off.
	Metrics string `toml:"metrics"`
	// Retention purges records older than this; 0 keeps everything.
	Retention Duration `toml:"retention"`
	// MaxClockSkew is how far a record's createdAt may lie after its
	// arrival before the store orders, recalls and purges it by its
	// arrival time instead (the signed createdAt is kept).
	MaxClockSkew Duration `toml:"max_clock_skew"`
	// StrictSignatures refuses every unsigned record. Off, an unsigned
	// record is admitted only from an author whose key is not known and
	// who never signed (MMP §18.3.1).
	StrictSignatures bool `toml:"strict_signatures"`
	// LogJSON switches stderr logs from text to JSON.
	LogJSON bool `toml:"log_json"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `toml:"log_level"`

	// Embeddings and SVAF tune recall and admission (recall.go).
	Embeddings Embeddings `toml:"embeddings"`
	SVAF       SVAF       `toml:"svaf"`
	// Admission bounds what peers can make the node spend (admission.go).
	Admission Admission `toml:"admission"`
}

// Duration is a time.Duration written as "720h" in TOML.
type Duration struct{ time.Duration }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: %w (write it like \"720h\" or \"30m\")", b, err)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", b)
	}
	d.Duration = v
	return nil
}

func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Default returns the settings a node runs with when nothing is configured.
func Default() Config {
	return Config{
		Group:            group.Default,
		RotationGrace:    Duration{24 * time.Hour},
		Listen:           DefaultListen(),
		Relays:           []string{},
		Reachability:     "auto",
		MDNS:             true,
		PeerTarget:       DefaultPeerTarget,
		MaxClockSkew:     Duration{5 * time.Minute},
		StrictSignatures: true,
		LogLevel:         "info",
		Embeddings:       DefaultEmbeddings(),
		SVAF:             DefaultSVAF(),
		Admission:        DefaultAdmission(),
	}
}

// DefaultPeerTarget is peer_target's default: well above GossipSub's mesh
// degree (12 at most), so any two members of a group of thousands are a
// few hops apart, at about half a megabyte of heap per connection.
const DefaultPeerTarget = 32

// MaxPeerTarget bounds peer_target: each connection costs memory and a
// share of every CMB's gossip.
const MaxPeerTarget = 1024

// SwarmPort is the default libp2p port, TCP and UDP (QUIC). It is fixed so
// an address given to other members survives restarts; the mesh falls back
// to a random port, with a WARN, when it is taken and listen is the
// default.
const SwarmPort = 4747

// DefaultListen is every IPv4 interface on SwarmPort, TCP and QUIC.
func DefaultListen() []string {
	return []string{fmt.Sprintf("/ip4/0.0.0.0/tcp/%d", SwarmPort), fmt.Sprintf("/ip4/0.0.0.0/udp/%d/quic-v1", SwarmPort)}
}

// IsDefaultListen reports whether listen is DefaultListen's.
func IsDefaultListen(listen []string) bool {
	return slices.Equal(listen, DefaultListen())
}

// Path is where the config file lives in a home.
func Path(home string) string { return filepath.Join(home, FileName) }

// Load reads home's config.toml over the defaults. A missing file is not an
// error: the defaults stand. Unknown keys are errors, so a typo is not
// silently ignored.
func Load(home string) (Config, error) {
	c := Default()
	path := Path(home)
	data, perm, err := readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read config %s: %w", path, err)
	}
	md, err := toml.Decode(string(data), &c)
	if err != nil {
		return c, fmt.Errorf("parse config %s: %w", path, err)
	}
	if un := md.Undecoded(); len(un) > 0 {
		keys := make([]string, len(un))
		for i, k := range un {
			keys[i] = k.String()
		}
		return c, fmt.Errorf("config %s: unknown setting(s) %s", path, strings.Join(keys, ", "))
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	// A token others can read is no secret. Windows does not map
	// group/other onto these bits.
	if c.CGPHTTPToken != "" && runtime.GOOS != "windows" && perm&0o077 != 0 {
		return c, fmt.Errorf("config %s: %w: it sets cgp_http_token but has mode %04o, open to group or others; run: chmod 600 %s", path, ErrInsecure, perm, path)
	}
	return c, nil
}

// readFile reads path and the permissions of the file it read.
func readFile(path string) ([]byte, fs.FileMode, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	// Stat the open file, not the path, so the mode is that of what we read.
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	data, err := io.ReadAll(f)
	return data, fi.Mode().Perm(), err
}

// Validate checks values a flag or the file may have set.
func (c *Config) Validate() error {
	if err := group.Validate(c.Group); err != nil {
		return fmt.Errorf("group: %w", err)
	}
	if err := CheckLogLevel(c.LogLevel); err != nil {
		return fmt.Errorf("log_level %w", err)
	}
	if err := cmp.Or(CheckEach("listen", c.Listen, CheckListen),
		CheckEach("bootstrap", c.Bootstrap, CheckBootstrap),
		CheckEach("relays", c.Relays, CheckBootstrap)); err != nil {
		return err
	}
	if err := CheckReachability(c.Reachability); err != nil {
		return fmt.Errorf("reachability: %w", err)
	}
	if c.PeerTarget < 1 || c.PeerTarget > MaxPeerTarget {
		return fmt.Errorf("peer_target %d: use a number of members from 1 to %d", c.PeerTarget, MaxPeerTarget)
	}
	if err := CheckHostPort(c.CGPHTTP); err != nil {
		return fmt.Errorf("cgp_http: %w", err)
	}
	if err := CheckHostPort(c.Metrics); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if c.CGPHTTPToken != "" {
		if err := cgp.CheckBearerToken(c.CGPHTTPToken); err != nil {
			return fmt.Errorf("cgp_http_token: %w", err)
		}
	}
	if err := c.Admission.validate(); err != nil {
		return err
	}
	return c.validateRecall()
}

// CheckLogLevel checks a log level: debug, info, warn or error.
func CheckLogLevel(l string) error {
	switch l {
	case "debug", "info", "warn", "error":
		return nil
	}
	return fmt.Errorf("%q: use debug, info, warn or error", l)
}

// CheckEach runs check on each of addrs, naming setting (the key or flag
// that gave them) in the error.
func CheckEach(setting string, addrs []string, check func(string) error) error {
	for _, a := range addrs {
		if err := check(a); err != nil {
			return fmt.Errorf("%s: %w", setting, err)
		}
	}
	return nil
}

// CheckListen checks one listen address: a multiaddr.
func CheckListen(addr string) error {
	if _, err := ma.NewMultiaddr(addr); err != nil {
		return fmt.Errorf("%q is not a multiaddr (write it like /ip4/0.0.0.0/tcp/4001): %w", addr, err)
	}
	return nil
}

// CheckBootstrap checks one bootstrap peer: a multiaddr ending in /p2p/<peer id>.
func CheckBootstrap(addr string) error {
	m, err := ma.NewMultiaddr(addr)
	if err != nil {
		return fmt.Errorf("%q is not a multiaddr (write it like /ip4/192.0.2.10/tcp/4001/p2p/12D3KooW…): %w", addr, err)
	}
	if _, err := m.ValueForProtocol(ma.P_P2P); err != nil {
		return fmt.Errorf("%q names no peer: end it with /p2p/<peer id>, as `cmbnode status` shows it", addr)
	}
	return nil
}

// CheckReachability checks a reachability setting: auto, public or private.
func CheckReachability(r string) error {
	switch r {
	case "auto", "public", "private":
		return nil
	}
	return fmt.Errorf("%q: use auto, public or private", r)
}

// CheckHostPort checks an HTTP listen address, HOST:PORT or :PORT; ""
// (off) passes.
func CheckHostPort(addr string) error {
	if addr == "" {
		return nil
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return fmt.Errorf("%q is not HOST:PORT (write it like 127.0.0.1:7474)", addr)
	}
	return nil
}

// Write creates home's config.toml with every setting commented, refusing to
// overwrite an existing file.
func Write(home string, c Config) error {
	path := Path(home)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("write config: %s %w; edit it or remove it first", path, ErrExists)
		}
		return fmt.Errorf("write config: %w", err)
	}
	_, err = f.WriteString(Render(c))
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("write config %s: %w", path, err)
	}
	return f.Close()
}

// quote is s as a TOML string.
func quote(s string) string { return fmt.Sprintf("%q", s) }

// tomlList is xs as a TOML array of strings.
func tomlList(xs []string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = quote(x)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Render returns c as a commented config.toml.
func Render(c Config) string {
	var b strings.Builder
	token := `# cgp_http_token = ""`
	if c.CGPHTTPToken != "" {
		token = "cgp_http_token = " + quote(c.CGPHTTPToken)
	}
	fmt.Fprintf(&b, `# cmbnode configuration. Flags given to "cmbnode daemon" override these
# settings. The node's identity (nodeId, name, keys) is in identity.json.

# The mesh group to join: [a-z0-9-_.]+, at most 64 characters. Nodes only
# exchange memory with nodes of the same group.
group = %s

# A private group (public = false, the default) admits only nodes that hold
# its secret (groups/<group>/ in this directory, made by "cmbnode group
# create" or "cmbnode join", or on first start) and encrypts every CMB it
# sends. public = true makes the group name-only, for plain MMP nodes:
# anyone who knows the name can join and read everything.
public = %t

# After "cmbnode group rotate", peers that hold only the previous secret are
# still admitted for this long, then refused.
rotation_grace = %s

# libp2p listen addresses. The default is the swarm port 4747, TCP and UDP
# (QUIC), so the addresses other members were given survive a restart; when
# 4747 is taken the daemon warns and picks a random port. A port set here
# that is taken is an error. Port 0 picks a free port at start.
listen = %s

# Peers to dial at start and re-dial with backoff, as full multiaddrs, e.g.
# "/ip4/192.0.2.10/tcp/4747/p2p/12D3KooW...". Members met before are also
# re-dialled from peers.json in this directory.
bootstrap = %s

# Members that relay for the group (relay_service = true on a member with a
# public address), as full multiaddrs. They are kept dialled; while this
# node is not publicly reachable it reserves a slot on them, members behind
# NATs meet through them, and hole punching then tries a direct connection.
relays = %s

# Serve circuit relay v2 to this group's members (only to peers that passed
# the handshake and membership proof). Turn on for a member with a public
# address.
relay_service = %t

# How others reach this node: "auto" (AutoNAT asks other members), "public"
# (its addresses are dialable) or "private" (behind NAT: reserve on the
# relays at once). Set it when the group is too small for AutoNAT to decide.
reachability = %s

# Ask the router for a port mapping (UPnP / NAT-PMP).
nat_port_map = %t

# Find peers of the same group on the LAN with mDNS.
mdns = %t

# How many members this node keeps connected by its own dials (members it
# learns of from peers, the LAN and peers.json); bootstrap peers, relays and
# members you connect to come on top. GossipSub spreads every CMB over this
# partial mesh. More costs about half a megabyte of memory per connection.
peer_target = %d

# Context Graph Protocol over HTTP, e.g. "127.0.0.1:7474". Empty turns it off.
# (Hosts reach the node over stdio with "cmbnode cgp" without this.)
cgp_http = %s

# The bearer token HTTP clients must send ("Authorization: Bearer <token>").
# Unset, the daemon mints one into cgp-http.token in this directory (mode
# 0600) on first start; delete that file and restart to rotate it. Set here,
# it must be at least 32 letters, digits or -._~+/ (e.g. the output of
# "openssl rand -hex 32"), and this file must be mode 0600.
%s

# Prometheus metrics endpoint, e.g. "127.0.0.1:9464". Empty turns it off.
metrics = %s

# Purge records older than this ("720h" = 30 days). "0s" keeps everything.
# Records that a kept record's lineage references are never purged.
retention = %s

# A record dated more than this after it arrives here (its author's clock
# runs ahead) is listed, recalled and purged by its arrival time; its signed
# createdAt is kept as the author wrote it. "0s" means the default, "5m".
max_clock_skew = %s

# Refuse every unsigned record (true), or admit one only from an author
# whose key this node does not know and who has never signed (false, MMP
# §18.3.1's permissive rule). An unsigned record from an author known to
# sign is refused either way.
strict_signatures = %t

# Logs go to stderr: text, or JSON when log_json is true.
log_json = %t
log_level = %s
`, quote(c.Group), c.Public, quote(c.RotationGrace.String()), tomlList(c.Listen), tomlList(c.Bootstrap), tomlList(c.Relays), c.RelayService, quote(c.Reachability), c.NATPortMap, c.MDNS, c.PeerTarget, quote(c.CGPHTTP), token, quote(c.Metrics), quote(c.Retention.String()), quote(c.MaxClockSkew.String()), c.StrictSignatures, c.LogJSON, quote(c.LogLevel))
	b.WriteString(renderRecall(c))
	b.WriteString(renderAdmission(c))
	return b.String()
}
