// Package groupkey owns a private group's secrets and everything derived
// from them: the opaque tag that names the group on the wire, the
// per-connection membership proof, and the envelope every CMB of the group
// travels in (gossip, fetch and catch-up alike). It also reads and writes
// the secret files in a home and the one-line invites that carry a secret
// to another machine.
//
// A group has a random 16-byte id, fixed for its life, and one 32-byte
// random secret per epoch; `cmbnode group rotate` adds an epoch. All keys
// come from HKDF-SHA256 (golang.org/x/crypto/hkdf):
//
//	tag          = "p-" + hex(HKDF(ikm = id, salt = nil, info = "cmbnode group v1 tag")[:12])
//	prk(e)       = HKDF-Extract(salt = id, ikm = secret(e))
//	proofKey(e)  = HKDF-Expand(prk(e), "cmbnode group v1 proof"   || be32(e), 32)
//	recordKey(e) = HKDF-Expand(prk(e), "cmbnode group v1 records" || be32(e), 32)
//
// The package depends on nothing of the node but secretfile and group, and
// on no network library: callers pass PeerIDs as bytes.
package groupkey

import (
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/hkdf"

	"github.com/cmbnode/cmbnode/group"
)

// Sizes of the group's values, in bytes.
const (
	SecretSize = 32
	IDSize     = 16
	NonceSize  = 32 // a membership-proof nonce
	ProofSize  = sha256.Size
)

// Typed errors; every error this package returns for bad input wraps one,
// so callers test with errors.Is and word it for a person.
var (
	// ErrBadProof: a membership proof that does not verify (wrong secret,
	// tampered, truncated, replayed from another connection).
	ErrBadProof = errors.New("membership proof does not verify")
	// ErrUnknownEpoch: a secret epoch this node does not hold.
	ErrUnknownEpoch = errors.New("secret epoch not held here")
	// ErrEpochExpired: an epoch superseded longer ago than the grace period.
	ErrEpochExpired = errors.New("secret epoch expired")
	// ErrBadEnvelope: an envelope that is malformed or does not open under
	// the group's key (wrong group, tampered, truncated, another record).
	ErrBadEnvelope = errors.New("envelope does not open")
	// ErrNoSecret: the home holds no secret for the group.
	ErrNoSecret = errors.New("no secret for this group")
	// ErrOtherGroup: the home already holds a different private group of
	// the same name.
	ErrOtherGroup = errors.New("another private group of that name is held here")
)

// ID is a group's random id, fixed for its life.
type ID [IDSize]byte

// Secret is one epoch's random secret.
type Secret [SecretSize]byte

// Epoch is one secret of a group. Created is when it was made (by the
// rotating node, carried in its invite): an earlier epoch stays accepted
// until Created + the grace period.
type Epoch struct {
	N       uint32
	Secret  Secret
	Created time.Time
}

// Group is what a home holds of one private group.
type Group struct {
	Name   string
	ID     ID
	Epochs []Epoch
}

// Tag is the opaque name of a private group on the wire: the handshake's
// group field and the GossipSub topic use it instead of the group's name,
// so neither reveals the name, and two private groups that share a name
// differ. It is derived from the id alone, so it stays across rotations;
// it is an identifier, not a secret (any peer a member connects to sees
// the topic in GossipSub's subscription announcements).
func Tag(id ID) string {
	r := hkdf.New(sha256.New, id[:], nil, []byte("cmbnode group v1 tag"))
	var b [12]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		panic(err) // HKDF-SHA256 yields up to 8160 bytes
	}
	return "p-" + hex.EncodeToString(b[:])
}

// epochKeys are one epoch's derived keys.
type epochKeys struct {
	n       uint32
	created time.Time
	proof   []byte
	aead    cipher.AEAD
	secret  Secret // kept to compare with a re-read file and to print invites
}

func derive(id ID, e Epoch) (*epochKeys, error) {
	prk := hkdf.Extract(sha256.New, e.Secret[:], id[:])
	expand := func(label string) ([]byte, error) {
		info := binary.BigEndian.AppendUint32([]byte(label), e.N)
		k := make([]byte, 32)
		if _, err := io.ReadFull(hkdf.Expand(sha256.New, prk, info), k); err != nil {
			return nil, err
		}
		return k, nil
	}
	proof, err := expand("cmbnode group v1 proof")
	if err != nil {
		return nil, err
	}
	rk, err := expand("cmbnode group v1 records")
	if err != nil {
		return nil, err
	}
	aead, err := chacha20poly1305.NewX(rk)
	if err != nil {
		return nil, err
	}
	return &epochKeys{n: e.N, created: e.Created, proof: proof, aead: aead, secret: e.Secret}, nil
}

// Options tune a Keyring.
type Options struct {
	// Grace is how long an epoch stays accepted after the next one was
	// created; 0 refuses it at once.
	Grace time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Keyring is a private group's keys as a running node uses them. It is
// safe for concurrent use; Reload adds epochs written to the home since.
type Keyring struct {
	name  string
	id    ID
	tag   string
	grace time.Duration
	now   func() time.Time
	home  string // "" for a keyring built in memory

	mu     sync.RWMutex
	epochs []*epochKeys // ascending by n, never empty
}

// New builds a keyring from g.
func New(g Group, o Options) (*Keyring, error) {
	if err := group.Validate(g.Name); err != nil {
		return nil, err
	}
	if len(g.Epochs) == 0 {
		return nil, fmt.Errorf("group %s: %w", g.Name, ErrNoSecret)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	k := &Keyring{name: g.Name, id: g.ID, tag: Tag(g.ID), grace: o.Grace, now: o.Now}
	if err := k.add(g.Epochs); err != nil {
		return nil, err
	}
	return k, nil
}

// add derives and inserts epochs not yet held. An epoch held with another
// secret is an error: two secrets for one epoch means two groups.
func (k *Keyring) add(es []Epoch) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range es {
		if e.N == 0 {
			return fmt.Errorf("group %s: epoch 0 is not valid (epochs start at 1)", k.name)
		}
		i, found := slices.BinarySearchFunc(k.epochs, e.N, func(x *epochKeys, n uint32) int { return int(int64(x.n) - int64(n)) })
		if found {
			if k.epochs[i].secret != e.Secret {
				return fmt.Errorf("group %s epoch %d: %w (two different secrets)", k.name, e.N, ErrOtherGroup)
			}
			continue
		}
		ek, err := derive(k.id, e)
		if err != nil {
			return err
		}
		k.epochs = slices.Insert(k.epochs, i, ek)
	}
	return nil
}

// Name is the group's name; ID its id; Tag its wire name (see Tag).
func (k *Keyring) Name() string { return k.name }
func (k *Keyring) ID() ID       { return k.id }
func (k *Keyring) Tag() string  { return k.tag }

// Current is the newest epoch held: what this node proves with when the
// peer holds it too, and what it seals gossip with.
func (k *Keyring) Current() uint32 {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.epochs[len(k.epochs)-1].n
}

// Epochs lists the epochs held, ascending.
func (k *Keyring) Epochs() []uint32 {
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := make([]uint32, len(k.epochs))
	for i, e := range k.epochs {
		out[i] = e.n
	}
	return out
}

// Accepts reports whether a peer may use epoch n now: it is held and is
// the newest, or the next epoch was created less than the grace period
// ago. It returns nil, or an error wrapping ErrUnknownEpoch or
// ErrEpochExpired.
func (k *Keyring) Accepts(n uint32) error {
	k.mu.RLock()
	defer k.mu.RUnlock()
	_, err := k.acceptsLocked(n)
	return err
}

func (k *Keyring) acceptsLocked(n uint32) (*epochKeys, error) {
	for i, e := range k.epochs {
		if e.n != n {
			continue
		}
		if i == len(k.epochs)-1 {
			return e, nil
		}
		until := k.epochs[i+1].created.Add(k.grace)
		if k.now().After(until) {
			return nil, fmt.Errorf("epoch %d of group %s was superseded by epoch %d on %s and the %s grace period is over: %w",
				n, k.name, k.epochs[i+1].n, k.epochs[i+1].created.UTC().Format(time.RFC3339), k.grace, ErrEpochExpired)
		}
		return e, nil
	}
	return nil, fmt.Errorf("epoch %d of group %s: %w", n, k.name, ErrUnknownEpoch)
}

func (k *Keyring) held(n uint32) (*epochKeys, error) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for _, e := range k.epochs {
		if e.n == n {
			return e, nil
		}
	}
	return nil, fmt.Errorf("epoch %d of group %s: %w", n, k.name, ErrUnknownEpoch)
}

// Secret returns epoch n's secret and creation time, for an invite.
func (k *Keyring) Secret(n uint32) (Epoch, error) {
	e, err := k.held(n)
	if err != nil {
		return Epoch{}, err
	}
	return Epoch{N: e.n, Secret: e.secret, Created: e.created}, nil
}

// NewNonce returns a fresh random proof nonce.
func NewNonce() ([NonceSize]byte, error) {
	var n [NonceSize]byte
	_, err := rand.Read(n[:])
	return n, err
}

// proofInput is the transcript a membership proof authenticates. Every
// variable-length part is length-prefixed, so no two transcripts share
// bytes. It binds the group (tag), the epoch, both PeerIDs in role order
// (prover first, so a proof cannot be reflected back to its sender) and
// both sides' fresh nonces (so it cannot be replayed on another
// connection, not even between the same two peers).
func proofInput(tag string, epoch uint32, prover, verifier, proverNonce, verifierNonce []byte) []byte {
	b := []byte("cmbnode-group-proof-v1\x00")
	lp := func(x []byte) {
		b = binary.BigEndian.AppendUint16(b, uint16(len(x)))
		b = append(b, x...)
	}
	lp([]byte(tag))
	b = binary.BigEndian.AppendUint32(b, epoch)
	lp(prover)
	lp(verifier)
	lp(proverNonce)
	lp(verifierNonce)
	return b
}

// Prove computes this node's membership proof at epoch: HMAC-SHA256 under
// proofKey(epoch) over the transcript (see proofInput). prover is this
// node's PeerID, verifier the peer's, as bytes.
func (k *Keyring) Prove(epoch uint32, prover, verifier, proverNonce, verifierNonce []byte) ([]byte, error) {
	e, err := k.held(epoch)
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, e.proof)
	m.Write(proofInput(k.tag, epoch, prover, verifier, proverNonce, verifierNonce))
	return m.Sum(nil), nil
}

// Verify checks a peer's proof at epoch, which must be accepted now
// (Accepts). It returns nil or an error wrapping ErrBadProof,
// ErrUnknownEpoch or ErrEpochExpired.
func (k *Keyring) Verify(epoch uint32, prover, verifier, proverNonce, verifierNonce, proof []byte) error {
	k.mu.RLock()
	e, err := k.acceptsLocked(epoch)
	k.mu.RUnlock()
	if err != nil {
		return err
	}
	if len(proof) != ProofSize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrBadProof, len(proof), ProofSize)
	}
	m := hmac.New(sha256.New, e.proof)
	m.Write(proofInput(k.tag, epoch, prover, verifier, proverNonce, verifierNonce))
	if !hmac.Equal(m.Sum(nil), proof) {
		return ErrBadProof
	}
	return nil
}

// Envelope kinds: what the sealed bytes are, bound into the associated
// data so an envelope of one kind never opens as another.
const (
	KindGossip byte = 1 // a cmb frame published on the group topic
	KindRecord byte = 2 // one fetched record ({cmb, publicKey, e2ePublicKey})
)

// The envelope, byte for byte:
//
//	0   4  magic "CMBG"
//	4   1  version, 1
//	5   1  kind (KindGossip, KindRecord)
//	6   4  epoch, big-endian
//	10 24  XChaCha20-Poly1305 nonce, random
//	34  …  ciphertext and 16-byte tag
//
// The associated data is bytes 0–9 (the header), the group's tag, a zero byte and the
// record key (empty for gossip: a receiver does not know it before
// opening, and putting it in clear would give every observer the content
// address). The nonce is random, so the same plaintext sealed twice gives
// different bytes; with 192-bit nonces a random choice is safe at any
// volume.
const (
	envMagic   = "CMBG"
	envVersion = 1
	headerSize = 10
	// Overhead is what sealing adds to a plaintext.
	Overhead = headerSize + chacha20poly1305.NonceSizeX + chacha20poly1305.Overhead
)

func (k *Keyring) aad(hdr []byte, recordKey string) []byte {
	a := make([]byte, 0, len(hdr)+len(k.tag)+1+len(recordKey))
	a = append(a, hdr...)
	a = append(a, k.tag...)
	a = append(a, 0)
	return append(a, recordKey...)
}

// Seal seals plaintext under the current epoch.
func (k *Keyring) Seal(kind byte, recordKey string, plaintext []byte) ([]byte, error) {
	return k.SealEpoch(k.Current(), kind, recordKey, plaintext)
}

// SealEpoch seals plaintext under epoch (a session's negotiated epoch).
func (k *Keyring) SealEpoch(epoch uint32, kind byte, recordKey string, plaintext []byte) ([]byte, error) {
	e, err := k.held(epoch)
	if err != nil {
		return nil, err
	}
	out := make([]byte, headerSize+chacha20poly1305.NonceSizeX, Overhead+len(plaintext))
	copy(out, envMagic)
	out[4], out[5] = envVersion, kind
	binary.BigEndian.PutUint32(out[6:], epoch)
	if _, err := rand.Read(out[headerSize:]); err != nil {
		return nil, err
	}
	return e.aead.Seal(out, out[headerSize:], plaintext, k.aad(out[:headerSize], recordKey)), nil
}

// IsEnvelope reports whether b starts like an envelope (magic, version).
func IsEnvelope(b []byte) bool {
	return len(b) >= headerSize && string(b[:4]) == envMagic && b[4] == envVersion
}

// Open opens an envelope of kind for recordKey (empty for gossip) under
// the epoch it names, which must be accepted now. It returns the
// plaintext and the epoch, or an error wrapping ErrBadEnvelope,
// ErrUnknownEpoch or ErrEpochExpired.
func (k *Keyring) Open(kind byte, recordKey string, env []byte) ([]byte, uint32, error) {
	if len(env) < Overhead {
		return nil, 0, fmt.Errorf("%w: %d bytes, shorter than the %d-byte minimum", ErrBadEnvelope, len(env), Overhead)
	}
	if !IsEnvelope(env) {
		return nil, 0, fmt.Errorf("%w: not a version-%d envelope", ErrBadEnvelope, envVersion)
	}
	if env[5] != kind {
		return nil, 0, fmt.Errorf("%w: kind %d, want %d", ErrBadEnvelope, env[5], kind)
	}
	epoch := binary.BigEndian.Uint32(env[6:])
	k.mu.RLock()
	e, err := k.acceptsLocked(epoch)
	k.mu.RUnlock()
	if err != nil {
		return nil, epoch, err
	}
	nonce := env[headerSize : headerSize+chacha20poly1305.NonceSizeX]
	pt, err := e.aead.Open(nil, nonce, env[headerSize+chacha20poly1305.NonceSizeX:], k.aad(env[:headerSize], recordKey))
	if err != nil {
		return nil, epoch, fmt.Errorf("%w under epoch %d of group %s", ErrBadEnvelope, epoch, k.name)
	}
	return pt, epoch, nil
}

// NewGroup makes a group with a random id and a random epoch-1 secret.
func NewGroup(name string, now time.Time) (Group, error) {
	if err := group.Validate(name); err != nil {
		return Group{}, err
	}
	g := Group{Name: name}
	if _, err := rand.Read(g.ID[:]); err != nil {
		return Group{}, err
	}
	e, err := newEpoch(1, now)
	if err != nil {
		return Group{}, err
	}
	g.Epochs = []Epoch{e}
	return g, nil
}

func newEpoch(n uint32, now time.Time) (Epoch, error) {
	e := Epoch{N: n, Created: now.Truncate(time.Millisecond)}
	_, err := rand.Read(e.Secret[:])
	return e, err
}
