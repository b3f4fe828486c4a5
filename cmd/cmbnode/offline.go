package main

import (
	"bytes"
	"cmp"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/e2e"
	"github.com/cmbnode/cmbnode/group"
	"github.com/cmbnode/cmbnode/node/config"
	"github.com/cmbnode/cmbnode/node/identity"
)

func resolveHome(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	h, err := identity.DefaultHome()
	if err != nil {
		return "", fmt.Errorf("find home directory: %w (pass --home DIR or set $%s)", err, identity.HomeEnv)
	}
	return h, nil
}

func cmdInit(e *env, args []string) error {
	fs := newFlags(e, "init", "init [--name N] [--group G] [--public] [--home DIR] [--json]")
	home := homeFlag(fs)
	name := fs.String("name", "", "display name (default: derived from the hostname)")
	grp := fs.String("group", group.Default, "mesh group to join")
	public := fs.Bool("public", false, "a name-only group (anyone who knows the name can join and read); default: private, with a secret made on first start")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := e.parseNone(fs, args); err != nil {
		return err
	}
	if err := group.Validate(*grp); err != nil {
		return usagef("--group: %v", err)
	}
	h, err := resolveHome(*home)
	if err != nil {
		return err
	}
	id, err := identity.Create(h, *name, rand.Reader)
	if err != nil {
		return err
	}
	c := config.Default()
	c.Group, c.Public = *grp, *public
	if err := config.Write(h, c); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, map[string]any{
			"nodeId": id.NodeID, "name": id.Name, "group": c.Group, "home": h,
			"publicKey": id.PublicKeyB64(), "e2ePublicKey": id.E2EPublicKeyDER(),
		})
	}
	fmt.Fprintf(e.stdout, "created node %s (%s) in group %s\n", id.NodeID, id.Name, c.Group)
	fmt.Fprintf(e.stdout, "  identity  %s\n  config    %s\n  publicKey %s\n", identity.Path(h), config.Path(h), id.PublicKeyB64())
	fmt.Fprintln(e.stdout, "start it with: cmbnode daemon --home", h)
	return nil
}

func cmdCMB(e *env, args []string) error {
	// Without a tool the usage goes with the usage error, to stderr.
	return subcommand(e, args, e.stderr, "tool", "key, sign, verify, seal or open", `Usage: cmbnode cmb <tool> [flags] < record.json

  key     print the record's content address (cmb1-, or legacy cmb- if it has one)
  sign    fill in key, sig, sigAlg (and createdBy, createdAt, group if absent); print the record
  verify  check address, signature and audience; exit 0 accepted, 1 rejected, 2 bad input
  seal    encrypt the fields for one recipient's X25519 key
  open    decrypt a sealed record's fields

Fields may be given as {"text": …} objects or plain strings; a missing or empty
field counts as "neutral" (MMP §14 A1).`,
		map[string]func(*env, []string) error{"key": cmbKey, "sign": cmbSign, "verify": cmbVerify, "seal": cmbSeal, "open": cmbOpen})
}

// readInput reads one record as an author writes it (cmb.DecodeDraft), first
// giving each member in defaults that the record leaves out its default.
func readInput(e *env, defaults map[string]any) (*cmb.Record, error) {
	data, err := readStdin(e)
	if err != nil {
		return nil, err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		return nil, usagef("stdin is not a JSON object: %v", err)
	}
	if _, ok := obj["fields"]; !ok {
		return nil, usagef("record has no fields")
	}
	for k, v := range defaults {
		if _, ok := obj[k]; !ok {
			obj[k], _ = json.Marshal(v)
		}
	}
	full, _ := json.Marshal(obj)
	r, err := cmb.DecodeDraft(full)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return r, nil
}

func writeRecord(w io.Writer, r *cmb.Record) error {
	_, err := w.Write(append(r.Encode(), '\n'))
	return err
}

func cmbKey(e *env, args []string) error {
	fs := newFlags(e, "cmb key", "cmb key < record.json")
	if _, err := e.parse(fs, args); err != nil {
		return err
	}
	r, err := readInput(e, nil)
	if err != nil {
		return err
	}
	if r.IsSealed() {
		return usagef("the record's fields are sealed: open it first (cmbnode cmb open)")
	}
	texts := r.Fields.Texts()
	key := cmb.AddressV1(&texts, r.Parents(), r.CreatedBy)
	if cmb.SchemeOf(r.Key) == cmb.SchemeLegacy {
		key = cmb.AddressLegacy(&texts)
	}
	if r.IsRemix() && r.CreatedBy == "" {
		return usagef("a remix's address binds its author: set createdBy")
	}
	fmt.Fprintln(e.stdout, key)
	return nil
}

func cmbSign(e *env, args []string) error {
	fs := newFlags(e, "cmb sign", "cmb sign [--home DIR | --key-file F] < record.json")
	home := homeFlag(fs)
	keyFile := fs.String("key-file", "", "file holding a base64url Ed25519 seed (instead of the node identity)")
	if _, err := e.parse(fs, args); err != nil {
		return err
	}
	var priv ed25519.PrivateKey
	author := ""
	if *keyFile != "" {
		if *home != "" {
			return usagef("give --home or --key-file, not both")
		}
		k, err := identity.LoadSeedFile(*keyFile)
		if err != nil {
			return err
		}
		priv = k
	} else {
		id, err := loadIdentity(*home, "pass --key-file")
		if err != nil {
			return err
		}
		priv, author = id.Ed25519, id.NodeID
	}
	defaults := map[string]any{"createdAt": time.Now().UnixMilli(), "group": group.Default}
	if author != "" {
		defaults["createdBy"] = author
	}
	r, err := readInput(e, defaults)
	if err != nil {
		return err
	}
	if r.IsSealed() {
		return usagef("sign the record before sealing it: the signature covers the plaintext's address")
	}
	if r.CreatedBy == "" {
		return usagef("record has no createdBy: add it, or sign with --home to use the node's nodeId")
	}
	texts := r.Fields.Texts()
	r.Key = cmb.AddressV1(&texts, r.Parents(), r.CreatedBy)
	if err := r.Validate(); err != nil {
		return usagef("%v", err)
	}
	if err := r.Sign(priv); err != nil {
		return err
	}
	return writeRecord(e.stdout, r)
}

func cmbVerify(e *env, args []string) error {
	fs := newFlags(e, "cmb verify", "cmb verify --pubkey B64URL [--group G] [--node NODEID] [--x25519-key K --sender-x25519 K] < record.json")
	pubkey := fs.String("pubkey", "", "author's Ed25519 public key, base64url (required)")
	grp := fs.String("group", "", "receiver's group (default: the record's own group)")
	node := fs.String("node", "", "receiver's nodeId, for directed records (default: the record's recipient)")
	xkey := fs.String("x25519-key", "", "receiver's X25519 private key, to open a sealed record first")
	sender := fs.String("sender-x25519", "", "author's X25519 public key, to open a sealed record first")
	if _, err := e.parse(fs, args); err != nil {
		return err
	}
	if *pubkey == "" {
		return usagef("--pubkey is required")
	}
	pub, err := cmb.ParsePublicKey(*pubkey)
	if err != nil {
		return usagef("--pubkey: %v", err)
	}
	r, err := readRecord(e)
	if err != nil {
		return err
	}
	if r.IsSealed() {
		if *xkey == "" || *sender == "" {
			return usagef("the record is sealed: pass --x25519-key and --sender-x25519 to open it")
		}
		box, err := boxFrom(*xkey, *sender)
		if err != nil {
			return err
		}
		if r, err = e2e.OpenRecord(r, box); err != nil {
			return &rejected{"rejected: sealed: " + err.Error()}
		}
	}
	aud := cmb.Audience{Group: cmp.Or(*grp, group.Normalize(r.Group)), Self: cmp.Or(*node, r.To)}
	if err := r.Verify(cmb.Policy{Audience: aud, AuthorKey: pub}); err != nil {
		return &rejected{"rejected: " + err.Error()}
	}
	fmt.Fprintln(e.stdout, "accepted", r.Key)
	return nil
}

// readRecord reads a record exactly as given (no author conveniences).
func readRecord(e *env) (*cmb.Record, error) {
	data, err := readStdin(e)
	if err != nil {
		return nil, err
	}
	r, err := cmb.Decode(data)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return r, nil
}

// readStdin reads the one record a tool works on, bounded in size.
func readStdin(e *env) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(e.stdin, maxStdinSize+1))
	if err != nil {
		return nil, fmt.Errorf("read record from stdin: %w", err)
	}
	if len(data) > maxStdinSize {
		return nil, usagef("record on stdin is over %d bytes", maxStdinSize)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, usagef("no record on stdin: pipe one CMB JSON object in")
	}
	return unwrapRecord(data), nil
}

// unwrapRecord returns the record inside an object that carries one as its
// "cmb" member (`cmbnode get --json`'s output, a cmb frame) and has no
// fields of its own; anything else is returned as given.
func unwrapRecord(data []byte) []byte {
	var env struct {
		CMB    json.RawMessage `json:"cmb"`
		Fields json.RawMessage `json:"fields"`
	}
	if json.Unmarshal(data, &env) != nil || env.Fields != nil || len(env.CMB) == 0 || env.CMB[0] != '{' {
		return data
	}
	return env.CMB
}

// loadIdentity loads the node identity of a home for a tool that can also
// take its key by flag (named in alt).
func loadIdentity(home, alt string) (*identity.Identity, error) {
	h, err := resolveHome(home)
	if err != nil {
		return nil, err
	}
	id, err := identity.Load(h)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no identity at %s; run `cmbnode init --home %s`, or %s", identity.Path(h), h, alt)
	}
	return id, err // names the file and the fix
}

func boxFrom(ownPriv, peerPub string) (*e2e.Box, error) {
	own, err := e2e.ParsePrivateKey(ownPriv)
	if err != nil {
		return nil, usagef("X25519 private key: %v", err)
	}
	peer, err := e2e.ParsePublicKey(peerPub)
	if err != nil {
		return nil, usagef("X25519 public key: %v", err)
	}
	box, err := e2e.NewBox(own, peer)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return box, nil
}

func cmbSeal(e *env, args []string) error {
	fs := newFlags(e, "cmb seal", "cmb seal --to-x25519 K [--x25519-key K | --home DIR] < record.json")
	home := homeFlag(fs)
	to := fs.String("to-x25519", "", "recipient's X25519 public key (raw base64url or DER-SPKI base64; required)")
	xkey := fs.String("x25519-key", "", "sender's X25519 private key (default: the node identity's)")
	if _, err := e.parse(fs, args); err != nil {
		return err
	}
	if *to == "" {
		return usagef("--to-x25519 is required")
	}
	var own *ecdh.PrivateKey
	if *xkey != "" {
		k, err := e2e.ParsePrivateKey(*xkey)
		if err != nil {
			return usagef("--x25519-key: %v", err)
		}
		own = k
	} else {
		id, err := loadIdentity(*home, "pass --x25519-key")
		if err != nil {
			return err
		}
		own = id.X25519
	}
	peer, err := e2e.ParsePublicKey(*to)
	if err != nil {
		return usagef("--to-x25519: %v", err)
	}
	box, err := e2e.NewBox(own, peer)
	if err != nil {
		return usagef("%v", err)
	}
	r, err := readRecord(e)
	if err != nil {
		return err
	}
	sealed, err := e2e.SealRecord(r, box, rand.Reader)
	if err != nil {
		return usagef("%v", err)
	}
	return writeRecord(e.stdout, sealed)
}

func cmbOpen(e *env, args []string) error {
	fs := newFlags(e, "cmb open", "cmb open --x25519-key K --sender-x25519 K < record.json")
	xkey := fs.String("x25519-key", "", "recipient's X25519 private key (required)")
	sender := fs.String("sender-x25519", "", "sender's X25519 public key (required)")
	if _, err := e.parse(fs, args); err != nil {
		return err
	}
	if *xkey == "" || *sender == "" {
		return usagef("--x25519-key and --sender-x25519 are required")
	}
	box, err := boxFrom(*xkey, *sender)
	if err != nil {
		return err
	}
	r, err := readRecord(e)
	if err != nil {
		return err
	}
	if !r.IsSealed() {
		return usagef("the record is not sealed")
	}
	opened, err := e2e.OpenRecord(r, box)
	if err != nil {
		if errors.Is(err, e2e.ErrAuth) || errors.Is(err, e2e.ErrTruncated) || errors.Is(err, cmb.ErrBadRecord) {
			return &rejected{"rejected: " + err.Error()}
		}
		return usagef("%v", err)
	}
	return writeRecord(e.stdout, opened)
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
