package groupkey

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cmbnode/cmbnode/group"
)

// An invite is one line a person can paste into a chat:
//
//	cmbnode-invite-1.<base64url(payload || SHA-256(payload)[:4])>
//
// where payload is JSON {"g": name, "i": hex id, "e": epoch, "s": base64url
// secret, "c": the epoch's creation (Unix ms), "x": expiry (Unix s, 0 for
// none), "a": [dialable multiaddrs with /p2p/], "n": the inviter's nodeId,
// "k": its Ed25519 public key (base64url)}. The inviter's key lets the
// joiner pin it before its first connection, so nobody can claim the
// inviter's nodeId to it first; invites without "n" and "k" (older ones)
// still parse. The checksum catches a
// garbled paste (a changed, dropped or added character) before anything is
// written. Whoever holds an invite holds the secret: the expiry guards
// against pasting a stale invite, it does not revoke one (rotate for that).
const (
	invitePrefix = "cmbnode-invite-1."
	maxInvite    = 8 << 10
	maxAddrs     = 16
	// inviterKeySize is an Ed25519 public key's.
	inviterKeySize = 32
	maxAddrLen     = 256
	checksumSize   = 4
)

// Reasons an invite is refused, wrapped by *InviteError.
var (
	ErrInviteGarbled = errors.New("garbled")
	ErrInviteExpired = errors.New("expired")
	ErrInviteGroup   = errors.New("for another group")
)

// InviteError is an invite refused; its text is one line naming what is wrong.
type InviteError struct {
	Err    error // ErrInviteGarbled, ErrInviteExpired or ErrInviteGroup
	Detail string
}

func (e *InviteError) Error() string { return "invite is " + e.Err.Error() + ": " + e.Detail }
func (e *InviteError) Unwrap() error { return e.Err }

// Invite carries one epoch of a group and where to find its members.
type Invite struct {
	Group   string
	ID      ID
	Epoch   Epoch
	Expires time.Time // zero: never
	Addrs   []string
	// InviterNodeID and InviterKey name the member that made the invite
	// (both or neither; the key is 32 bytes of Ed25519).
	InviterNodeID string
	InviterKey    []byte
}

type inviteJSON struct {
	G string   `json:"g"`
	I string   `json:"i"`
	E uint32   `json:"e"`
	S string   `json:"s"`
	C int64    `json:"c"`
	X int64    `json:"x,omitempty"`
	A []string `json:"a,omitempty"`
	N string   `json:"n,omitempty"`
	K string   `json:"k,omitempty"`
}

// String encodes the invite as its one line.
func (inv Invite) String() string {
	j := inviteJSON{
		G: inv.Group, I: hex.EncodeToString(inv.ID[:]), E: inv.Epoch.N,
		S: base64.RawURLEncoding.EncodeToString(inv.Epoch.Secret[:]), C: inv.Epoch.Created.UnixMilli(), A: inv.Addrs,
		N: inv.InviterNodeID,
	}
	if len(inv.InviterKey) > 0 {
		j.K = base64.RawURLEncoding.EncodeToString(inv.InviterKey)
	}
	if !inv.Expires.IsZero() {
		j.X = inv.Expires.Unix()
	}
	payload, _ := json.Marshal(j) // strings, numbers: cannot fail
	return invitePrefix + encodeWithSum(payload)
}

func garbled(format string, a ...any) error {
	return &InviteError{Err: ErrInviteGarbled, Detail: fmt.Sprintf(format, a...)}
}

// ParseInvite decodes an invite line (surrounding space is ignored) and
// refuses one that is garbled or has expired by now.
func ParseInvite(s string, now time.Time) (Invite, error) {
	s = strings.TrimSpace(s)
	if len(s) > maxInvite {
		return Invite{}, garbled("%d characters, an invite has at most %d", len(s), maxInvite)
	}
	body, ok := strings.CutPrefix(s, invitePrefix)
	if !ok {
		return Invite{}, garbled("it does not start with %q (copy the whole line)", invitePrefix)
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return Invite{}, garbled("not base64url after the prefix (%v)", err)
	}
	if len(raw) <= checksumSize {
		return Invite{}, garbled("truncated")
	}
	payload, check := raw[:len(raw)-checksumSize], raw[len(raw)-checksumSize:]
	sum := sha256.Sum256(payload)
	if !bytes.Equal(sum[:checksumSize], check) {
		return Invite{}, garbled("its checksum does not match (a character was changed, added or lost)")
	}
	var j inviteJSON
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return Invite{}, garbled("its contents do not decode (%v)", err)
	}
	var inv Invite
	if err := group.Validate(j.G); err != nil {
		return Invite{}, garbled("group: %v", err)
	}
	inv.Group = j.G
	id, err := hex.DecodeString(j.I)
	if err != nil || len(id) != IDSize {
		return Invite{}, garbled("the group id is not %d hex bytes", IDSize)
	}
	copy(inv.ID[:], id)
	sec, err := base64.RawURLEncoding.DecodeString(j.S)
	if err != nil || len(sec) != SecretSize {
		return Invite{}, garbled("the secret is not %d bytes", SecretSize)
	}
	if j.E == 0 || j.C <= 0 {
		return Invite{}, garbled("epoch %d, created %d: both must be positive", j.E, j.C)
	}
	inv.Epoch = Epoch{N: j.E, Created: time.UnixMilli(j.C)}
	copy(inv.Epoch.Secret[:], sec)
	if len(j.A) > maxAddrs {
		return Invite{}, garbled("%d addresses, at most %d", len(j.A), maxAddrs)
	}
	for _, a := range j.A {
		if len(a) > maxAddrLen || !strings.HasPrefix(a, "/") {
			return Invite{}, garbled("address %q is not a multiaddr", a)
		}
	}
	inv.Addrs = j.A
	if (j.N == "") != (j.K == "") {
		return Invite{}, garbled("it names the inviter's nodeId or key, not both")
	}
	if j.N != "" {
		if len(j.N) > 64 || strings.Trim(strings.ToLower(j.N), "0123456789abcdef-") != "" {
			return Invite{}, garbled("the inviter's nodeId %q is not a nodeId", j.N)
		}
		k, err := base64.RawURLEncoding.DecodeString(j.K)
		if err != nil || len(k) != inviterKeySize {
			return Invite{}, garbled("the inviter's key is not %d bytes of Ed25519", inviterKeySize)
		}
		inv.InviterNodeID, inv.InviterKey = strings.ToLower(j.N), k
	}
	if j.X != 0 {
		inv.Expires = time.Unix(j.X, 0)
		if now.After(inv.Expires) {
			return Invite{}, &InviteError{Err: ErrInviteExpired, Detail: fmt.Sprintf("it expired at %s; ask for a new one", inv.Expires.UTC().Format(time.RFC3339))}
		}
	}
	return inv, nil
}

// ForGroup refuses an invite for a group other than name.
func (inv Invite) ForGroup(name string) error {
	if inv.Group != name {
		return &InviteError{Err: ErrInviteGroup, Detail: fmt.Sprintf("it is for group %q, this node is in group %q", inv.Group, name)}
	}
	return nil
}

func encodeWithSum(payload []byte) string {
	sum := sha256.Sum256(payload)
	return base64.RawURLEncoding.EncodeToString(append(bytes.Clone(payload), sum[:checksumSize]...))
}
