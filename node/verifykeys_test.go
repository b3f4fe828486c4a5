package node

import (
	"crypto/ed25519"
	"testing"
)

func TestVerifyKeysCache(t *testing.T) {
	var c verifyKeys
	pub, priv, _ := ed25519.GenerateKey(nil)
	other, _, _ := ed25519.GenerateKey(nil)
	k := c.get(pub)
	if k == nil || c.get(pub) != k {
		t.Fatal("a key is not decoded once and kept")
	}
	if ko := c.get(other); ko == k || !ko.Is(other) || ko.Is(pub) {
		t.Fatal("two keys share a decoded key")
	}
	msg := []byte("payload")
	if !k.Verify(msg, ed25519.Sign(priv, msg)) || c.get(other).Verify(msg, ed25519.Sign(priv, msg)) {
		t.Fatal("a cached key verifies what it should not, or not what it should")
	}
	if c.get(pub[:31]) != nil {
		t.Fatal("a short key was decoded")
	}
	for i := 0; i < 3*frameKeysMax; i++ {
		p, _, _ := ed25519.GenerateKey(nil)
		c.get(p)
		if len(c.c.m) > frameKeysMax {
			t.Fatalf("the cache holds %d keys, more than %d", len(c.c.m), frameKeysMax)
		}
	}
}
