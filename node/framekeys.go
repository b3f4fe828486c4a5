package node

import (
	"crypto/ed25519"
	"fmt"
	"sync"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/e2e"
)

// frameKeys caches the author keys frames carry, parsed, by their text:
// every record of an author comes with the same two strings, and parsing
// the X25519 one (DER, as the reference runtime sends it) cost more than
// a tenth of a signature check per record. Only successful parses are
// kept, at most frameKeysMax pairs; the cache starts over when full.
type frameKeys struct {
	mu sync.Mutex
	m  map[[2]string]parsedKeys
}

type parsedKeys struct {
	pub ed25519.PublicKey
	x   []byte
}

const frameKeysMax = 1024

// parse returns the Ed25519 and X25519 keys of a frame ("" for absent),
// as authorKeys needs them.
func (c *frameKeys) parse(pub, x string) (parsedKeys, error) {
	k := [2]string{pub, x}
	c.mu.Lock()
	p, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return p, nil
	}
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
	c.mu.Lock()
	if c.m == nil || len(c.m) >= frameKeysMax {
		c.m = make(map[[2]string]parsedKeys, 16)
	}
	c.m[k] = p
	c.mu.Unlock()
	return p, nil
}

// verifyKeys keeps author keys decoded for verification (cmb.VerifyKey),
// by key: decoding is about a tenth of a signature check, and a group's
// records come from few authors. At most frameKeysMax keys are kept; the
// cache starts over when full, so a peer spraying keys costs a decode per
// record, as it did without the cache.
type verifyKeys struct {
	mu sync.Mutex
	m  map[[ed25519.PublicKeySize]byte]*cmb.VerifyKey
}

// get returns pub decoded, or nil when pub is not a key's length (the
// signature check then reports the length).
func (c *verifyKeys) get(pub ed25519.PublicKey) *cmb.VerifyKey {
	if len(pub) != ed25519.PublicKeySize {
		return nil
	}
	k := [ed25519.PublicKeySize]byte(pub)
	c.mu.Lock()
	v := c.m[k]
	c.mu.Unlock()
	if v != nil {
		return v
	}
	v = cmb.NewVerifyKey(pub)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= frameKeysMax {
		c.m = make(map[[ed25519.PublicKeySize]byte]*cmb.VerifyKey, 16)
	}
	c.m[k] = v
	c.mu.Unlock()
	return v
}
