package node

import (
	"crypto/ed25519"
	"fmt"
	"sync"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/e2e"
)

// keyCache is a small bounded cache of parsed keys: at most frameKeysMax
// entries, and it starts over when full, so a peer spraying keys costs a
// parse per record, as it would without the cache.
type keyCache[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
}

const frameKeysMax = 1024

func (c *keyCache[K, V]) get(k K) (V, bool) {
	c.mu.Lock()
	v, ok := c.m[k]
	c.mu.Unlock()
	return v, ok
}

func (c *keyCache[K, V]) put(k K, v V) {
	c.mu.Lock()
	if c.m == nil || len(c.m) >= frameKeysMax {
		c.m = make(map[K]V, 16)
	}
	c.m[k] = v
	c.mu.Unlock()
}

// frameKeys caches the author keys frames carry, parsed, by their text:
// every record of an author comes with the same two strings, and parsing
// the X25519 one (DER, as the reference runtime sends it) cost more than
// a tenth of a signature check per record. Only successful parses are
// kept.
type frameKeys struct {
	c keyCache[[2]string, parsedKeys]
}

type parsedKeys struct {
	pub ed25519.PublicKey
	x   []byte
}

// parse returns the Ed25519 and X25519 keys of a frame ("" for absent),
// as authorKeys needs them.
func (f *frameKeys) parse(pub, x string) (parsedKeys, error) {
	k := [2]string{pub, x}
	if p, ok := f.c.get(k); ok {
		return p, nil
	}
	var p parsedKeys
	if pub != "" {
		key, err := cmb.ParsePublicKey(pub)
		if err != nil {
			return parsedKeys{}, fmt.Errorf("%w: frame author key: %v", ErrRejected, err)
		}
		p.pub = key
	}
	if x != "" {
		key, err := e2e.ParsePublicKey(x)
		if err != nil {
			return parsedKeys{}, fmt.Errorf("%w: frame author encryption key: %v", ErrRejected, err)
		}
		p.x = key.Bytes()
	}
	f.c.put(k, p)
	return p, nil
}

// verifyKeys keeps author keys decoded for verification (cmb.VerifyKey),
// by key: decoding is about a tenth of a signature check, and a group's
// records come from few authors.
type verifyKeys struct {
	c keyCache[[ed25519.PublicKeySize]byte, *cmb.VerifyKey]
}

// get returns pub decoded, or nil when pub is not a key's length (the
// signature check then reports the length).
func (v *verifyKeys) get(pub ed25519.PublicKey) *cmb.VerifyKey {
	if len(pub) != ed25519.PublicKeySize {
		return nil
	}
	k := [ed25519.PublicKeySize]byte(pub)
	if vk, ok := v.c.get(k); ok {
		return vk
	}
	vk := cmb.NewVerifyKey(pub)
	v.c.put(k, vk)
	return vk
}
