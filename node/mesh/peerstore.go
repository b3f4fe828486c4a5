package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// PeerstoreFile is the peerstore's name in the home.
const PeerstoreFile = "peers.json"

// Peerstore bounds. The file lists members this node admitted (their
// handshake and, in a private group, membership proof verified), so a
// stranger can never put an entry there; still it is bounded, so a large
// group cannot grow it without end: the most recently seen knownMax peers,
// knownAddrs addresses each, none unseen for knownTTL.
const (
	knownMax      = 256
	knownAddrs    = 8
	knownTTL      = 30 * 24 * time.Hour
	knownSaveIval = 5 * time.Second
	// knownAttempts bounds the dials to one remembered peer at start.
	knownAttempts = 8
	knownVersion  = 1
)

type knownFile struct {
	V     int         `json:"v"`
	Peers []knownPeer `json:"peers"`
}

type knownPeer struct {
	PeerID   string   `json:"peerId"`
	NodeID   string   `json:"nodeId"`
	Addrs    []string `json:"addrs"`
	LastSeen int64    `json:"lastSeen"` // unix ms
}

// knownPeers is the persisted peerstore: members' addresses and when they
// were last seen. It is written whole, atomically (a temp file renamed
// over the old one), at most every knownSaveIval and at Close.
type knownPeers struct {
	path string
	log  *slog.Logger

	mu    sync.Mutex
	peers map[string]knownPeer
	dirty bool
	// seen is signalled by saw (coalescing): what wakes the save loop
	// once it sleeps for want of sessions.
	seen chan struct{}
}

// loadKnown reads the peerstore; a missing file is an empty one, and an
// unreadable one is logged and replaced (it holds hints, not state).
func loadKnown(path string, log *slog.Logger) *knownPeers {
	k := &knownPeers{path: path, log: log, peers: map[string]knownPeer{}, seen: make(chan struct{}, 1)}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return k
	case err != nil:
		log.Warn("cannot read the peerstore; starting without it", "file", path, "err", err)
		return k
	}
	var f knownFile
	if err := json.Unmarshal(b, &f); err != nil || f.V != knownVersion {
		log.Warn("the peerstore is unreadable; starting without it", "file", path, "err", err, "version", f.V)
		return k
	}
	cut := time.Now().Add(-knownTTL).UnixMilli()
	for _, p := range f.Peers {
		if _, err := peer.Decode(p.PeerID); err != nil || p.LastSeen < cut {
			continue
		}
		p.Addrs = p.Addrs[:min(len(p.Addrs), knownAddrs)]
		k.peers[p.PeerID] = p
	}
	k.trim()
	return k
}

// addrInfos are the remembered peers, most recently seen first.
func (k *knownPeers) addrInfos() []peer.AddrInfo {
	k.mu.Lock()
	ps := make([]knownPeer, 0, len(k.peers))
	for _, p := range k.peers {
		ps = append(ps, p)
	}
	k.mu.Unlock()
	slices.SortFunc(ps, func(a, b knownPeer) int { return int(b.LastSeen - a.LastSeen) })
	var out []peer.AddrInfo
	for _, p := range ps {
		id, err := peer.Decode(p.PeerID)
		if err != nil {
			continue
		}
		ai := peer.AddrInfo{ID: id}
		for _, s := range p.Addrs {
			if a, err := ma.NewMultiaddr(s); err == nil {
				ai.Addrs = append(ai.Addrs, a)
			}
		}
		if len(ai.Addrs) > 0 {
			out = append(out, ai)
		}
	}
	return out
}

// has reports whether pid is a remembered member: one this node admitted.
func (k *knownPeers) has(pid peer.ID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.peers[pid.String()]
	return ok
}

// saw records an admitted peer's addresses (the connection's remote
// address first) as of now.
func (k *knownPeers) saw(pid peer.ID, nodeID string, addrs []ma.Multiaddr) {
	p := knownPeer{PeerID: pid.String(), NodeID: nodeID, LastSeen: time.Now().UnixMilli()}
	for _, a := range addrs {
		s := a.String()
		if len(p.Addrs) < knownAddrs && !slices.Contains(p.Addrs, s) {
			p.Addrs = append(p.Addrs, s)
		}
	}
	k.mu.Lock()
	k.peers[p.PeerID] = p
	k.trim()
	k.dirty = true
	k.mu.Unlock()
	select {
	case k.seen <- struct{}{}:
	default:
	}
}

// trim keeps the knownMax most recently seen; k.mu held (or k unshared).
func (k *knownPeers) trim() {
	if len(k.peers) <= knownMax {
		return
	}
	ps := make([]knownPeer, 0, len(k.peers))
	for _, p := range k.peers {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b knownPeer) int { return int(b.LastSeen - a.LastSeen) })
	for _, p := range ps[knownMax:] {
		delete(k.peers, p.PeerID)
	}
}

// save writes the file if anything changed since the last write.
func (k *knownPeers) save() error {
	k.mu.Lock()
	if !k.dirty {
		k.mu.Unlock()
		return nil
	}
	f := knownFile{V: knownVersion, Peers: make([]knownPeer, 0, len(k.peers))}
	for _, p := range k.peers {
		f.Peers = append(f.Peers, p)
	}
	k.dirty = false
	k.mu.Unlock()
	slices.SortFunc(f.Peers, func(a, b knownPeer) int { return int(b.LastSeen - a.LastSeen) })
	b, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		return err
	}
	if err := writeAtomic(k.path, append(b, '\n')); err != nil {
		k.mu.Lock()
		k.dirty = true
		k.mu.Unlock()
		return err
	}
	return nil
}

// saveKnownLoop refreshes the admitted peers' entries (identify may have
// taught us more of their addresses since they were admitted) and writes
// the file every knownSaveIval when it changed. With no session nothing
// changes it until a peer is admitted (saw): the loop sleeps until then
// rather than wake an idle daemon every knownSaveIval.
func (m *Mesh) saveKnownLoop(ctx context.Context) {
	t := time.NewTicker(knownSaveIval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return // Close saves once more
		case <-t.C:
		}
		ss := m.sessions("")
		for _, s := range ss {
			m.remember(s)
		}
		err := m.known.save()
		if err != nil {
			m.log.Warn("could not save the peerstore", "file", m.known.path, "err", err)
		}
		if len(ss) > 0 || err != nil { // a failed write is tried again
			continue
		}
		// A peer admitted since sessions() was read has signalled seen.
		t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-m.known.seen:
		}
		t.Reset(knownSaveIval)
	}
}

// writeAtomic replaces path with data: a reader sees the old file or the
// new one, never a part, and a crash leaves one of the two.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*.tmp")
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer os.Remove(name) // after the rename this only drops nothing
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("flush %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(name, path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// remember records an admitted session's peer in the peerstore: the
// address of the connection it came over first, then what the peerstore
// knows (its listen and circuit addresses, from identify).
func (m *Mesh) remember(ss *session) {
	if m.known == nil {
		return
	}
	addrs := []ma.Multiaddr{ss.s.Conn().RemoteMultiaddr()}
	addrs = append(addrs, m.h.Peerstore().Addrs(ss.pid)...)
	m.known.saw(ss.pid, ss.nodeID, addrs)
}
