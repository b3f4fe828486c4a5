package identity_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/e2e"
	"github.com/cmbnode/cmbnode/node/identity"
)

func mustCreate(t *testing.T, home, name string) *identity.Identity {
	t.Helper()
	id, err := identity.Create(home, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestCreateLoadRoundTrip(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home") // does not exist yet
	before := time.Now().Add(-time.Second)
	created := mustCreate(t, home, "alice's node")

	if fi, err := os.Stat(home); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("home: %v, mode %v; want a 0700 directory", err, fi.Mode().Perm())
	}
	fi, err := os.Stat(identity.Path(home))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("identity file mode %04o, want 0600", fi.Mode().Perm())
	}
	if entries, _ := os.ReadDir(home); len(entries) != 1 {
		t.Errorf("home holds %d entries, want only %s (temp file left behind?)", len(entries), identity.FileName)
	}

	loaded, err := identity.Load(home)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.NodeID != created.NodeID || loaded.Name != "alice's node" || loaded.Hostname != created.Hostname {
		t.Errorf("loaded %+v, created %+v", loaded, created)
	}
	if !loaded.CreatedAt.Equal(created.CreatedAt) || loaded.CreatedAt.Before(before) || loaded.CreatedAt.After(time.Now()) {
		t.Errorf("createdAt %v, created %v", loaded.CreatedAt, created.CreatedAt)
	}
	if !loaded.Ed25519.Equal(created.Ed25519) || !loaded.X25519.Equal(created.X25519) {
		t.Error("keys changed across save and load")
	}
	if loaded.PublicKeyB64() != base64.RawURLEncoding.EncodeToString(created.PublicKey()) {
		t.Error("PublicKeyB64 is not the unpadded base64url public key")
	}
	if !strings.HasPrefix(loaded.E2EPublicKeyDER(), "MCowBQYDK2VuAyEA") {
		t.Errorf("E2EPublicKeyDER %s is not DER SPKI", loaded.E2EPublicKeyDER())
	}

	// The file itself: documented members and encodings, pretty-printed.
	data, _ := os.ReadFile(identity.Path(home))
	if !bytes.Contains(data, []byte("\n  \"nodeId\"")) {
		t.Errorf("file is not pretty-printed:\n%s", data)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for member, wantLen := range map[string]int{"ed25519Seed": 43, "publicKey": 43, "x25519Private": 43, "x25519Public": 60} {
		s, _ := m[member].(string)
		if len(s) != wantLen {
			t.Errorf("%s = %q, want a %d-character string", member, s, wantLen)
		}
	}
	if m["x25519Public"] != loaded.E2EPublicKeyDER() {
		t.Error("x25519Public is not the DER-SPKI form")
	}
}

func TestNodeIDIsLowercaseV7(t *testing.T) {
	a := mustCreate(t, t.TempDir(), "a")
	b := mustCreate(t, t.TempDir(), "b")
	for _, id := range []string{a.NodeID, b.NodeID} {
		u, err := uuid.Parse(id)
		if err != nil {
			t.Fatal(err)
		}
		if u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Errorf("nodeId %s is version %d variant %v, want v7 RFC 4122", id, u.Version(), u.Variant())
		}
		if id != strings.ToLower(id) {
			t.Errorf("nodeId %s is not lowercase", id)
		}
		if err := cmb.ValidateNodeID(id); err != nil {
			t.Error(err)
		}
	}
	if a.NodeID == b.NodeID {
		t.Error("two identities share a nodeId")
	}
}

func TestCreateUsesSuppliedRandomness(t *testing.T) {
	stream := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 16)
	id, err := identity.Create(t.TempDir(), "det", bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(id.Ed25519.Seed(), stream[:32]) || !bytes.Equal(id.X25519.Bytes(), stream[32:64]) {
		t.Error("keys were not drawn from the supplied reader")
	}
	if _, err := identity.Create(t.TempDir(), "short", bytes.NewReader(stream[:40])); err == nil {
		t.Error("Create succeeded with too little randomness")
	}
}

func TestCreateRefusesOverwrite(t *testing.T) {
	home := t.TempDir()
	mustCreate(t, home, "first")
	before, _ := os.ReadFile(identity.Path(home))

	_, err := identity.Create(home, "second", nil)
	if !errors.Is(err, identity.ErrExists) {
		t.Fatalf("got %v, want ErrExists", err)
	}
	if !strings.Contains(err.Error(), identity.Path(home)) {
		t.Errorf("error %q does not name the file", err)
	}
	after, _ := os.ReadFile(identity.Path(home))
	if !bytes.Equal(before, after) {
		t.Error("existing identity file was modified")
	}
}

func TestConcurrentCreateHasOneWinner(t *testing.T) {
	home := t.TempDir()
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := identity.Create(home, "racer", nil)
			errs <- err
		}()
	}
	won := 0
	for range n {
		switch err := <-errs; {
		case err == nil:
			won++
		case !errors.Is(err, identity.ErrExists):
			t.Errorf("unexpected error: %v", err)
		}
	}
	if won != 1 {
		t.Errorf("%d creators succeeded, want exactly 1", won)
	}
	if _, err := identity.Load(home); err != nil {
		t.Error(err)
	}
}

func TestCreateRejectsBadName(t *testing.T) {
	for _, name := range []string{"tab\there", strings.Repeat("x", 65), "bad\xffutf8"} {
		home := t.TempDir()
		if _, err := identity.Create(home, name, nil); !errors.Is(err, cmb.ErrBadName) {
			t.Errorf("name %q: got %v, want a bad-name error", name, err)
		}
		if _, err := os.Stat(identity.Path(home)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("name %q: a file was written anyway", name)
		}
	}
}

func TestCreateEmptyNameUsesDefault(t *testing.T) {
	id := mustCreate(t, t.TempDir(), "")
	if id.Name != identity.DefaultName(id.NodeID) {
		t.Errorf("name %q, want DefaultName %q", id.Name, identity.DefaultName(id.NodeID))
	}
	hex := strings.ReplaceAll(id.NodeID, "-", "")
	if !strings.HasSuffix(id.Name, "-"+hex[len(hex)-4:]) {
		t.Errorf("default name %q does not end in the nodeId's short id", id.Name)
	}
	// Two nodes on one host get different default names; a given name is kept.
	if other := mustCreate(t, t.TempDir(), ""); other.Name == id.Name {
		t.Errorf("two default names are both %q", id.Name)
	}
	if named := mustCreate(t, t.TempDir(), "vm"); named.Name != "vm" {
		t.Errorf("an explicit name became %q", named.Name)
	}
	if err := cmb.ValidateName(id.Name); err != nil {
		t.Error(err)
	}
}

func TestLoadPermissions(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permission bits")
	}
	for _, tc := range []struct {
		mode fs.FileMode
		ok   bool
	}{
		{0o600, true},
		{0o400, true},
		{0o644, false},
		{0o640, false},
		{0o604, false},
		{0o660, false},
		{0o602, false},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			home := t.TempDir()
			mustCreate(t, home, "n")
			path := identity.Path(home)
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			_, err := identity.Load(home)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, identity.ErrInsecure) {
				t.Fatalf("got %v, want ErrInsecure", err)
			}
			if !strings.Contains(err.Error(), "chmod 600 "+path) {
				t.Errorf("error %q does not tell how to fix it", err)
			}
		})
	}
}

func TestLoadMissing(t *testing.T) {
	home := t.TempDir()
	_, err := identity.Load(home)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("got %v, want fs.ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), identity.Path(home)) {
		t.Errorf("error %q does not name the file", err)
	}
}

// rewrite replaces the identity in home with the result of edit applied to its JSON members.
func rewrite(t *testing.T, home string, edit func(m map[string]any)) {
	t.Helper()
	path := identity.Path(home)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLoadRejectsDamagedFiles(t *testing.T) {
	other, err := identity.Create(t.TempDir(), "other", nil)
	if err != nil {
		t.Fatal(err)
	}
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	del := func(k string) func(map[string]any) { return func(m map[string]any) { delete(m, k) } }

	for _, tc := range []struct {
		name string
		edit func(map[string]any) // nil: raw replaces the file
		raw  string
		want string // a substring the message must contain
	}{
		{name: "not JSON", raw: "{not json", want: "not valid identity JSON"},
		{name: "empty file", raw: "", want: "not valid identity JSON"},
		{name: "JSON array", raw: "[]", want: "not valid identity JSON"},
		{name: "missing nodeId", edit: del("nodeId"), want: `"nodeId" is missing`},
		{name: "missing name", edit: del("name"), want: `"name" is missing`},
		{name: "missing createdAt", edit: del("createdAt"), want: `"createdAt" is missing`},
		{name: "missing seed", edit: del("ed25519Seed"), want: `"ed25519Seed" is missing`},
		{name: "missing publicKey", edit: del("publicKey"), want: `"publicKey" is missing`},
		{name: "missing x25519Private", edit: del("x25519Private"), want: `"x25519Private" is missing`},
		{name: "missing x25519Public", edit: del("x25519Public"), want: `"x25519Public" is missing`},
		{name: "nodeId not a UUID", edit: set("nodeId", "node-1"), want: "nodeId"},
		{name: "nodeId v1 UUID", edit: set("nodeId", "6ba7b810-9dad-11d1-80b4-00c04fd430c8"), want: "nodeId"},
		{name: "nodeId wrong type", edit: set("nodeId", 7), want: "not valid identity JSON"},
		{name: "empty name", edit: set("name", ""), want: "name"},
		{name: "control char in name", edit: set("name", "a\u0007b"), want: "name"},
		{name: "createdAt string", edit: set("createdAt", "yesterday"), want: "not valid identity JSON"},
		{name: "createdAt zero", edit: set("createdAt", 0), want: "createdAt"},
		{name: "seed 31 bytes", edit: set("ed25519Seed", base64.RawURLEncoding.EncodeToString(make([]byte, 31))), want: "ed25519Seed is 31 bytes"},
		{name: "seed not base64", edit: set("ed25519Seed", "!!!"), want: "ed25519Seed"},
		{name: "publicKey of another seed", edit: set("publicKey", other.PublicKeyB64()), want: "publicKey does not match ed25519Seed"},
		{name: "x25519Private garbage", edit: set("x25519Private", "AAAA"), want: "x25519Private"},
		{name: "x25519Public of another key", edit: set("x25519Public", other.E2EPublicKeyDER()), want: "x25519Public does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			mustCreate(t, home, "n")
			path := identity.Path(home)
			if tc.edit != nil {
				rewrite(t, home, tc.edit)
			} else if err := os.WriteFile(path, []byte(tc.raw), 0o600); err != nil {
				t.Fatal(err)
			}
			before, _ := os.ReadFile(path)

			_, err := identity.Load(home)
			if !errors.Is(err, identity.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) || !strings.Contains(msg, path) {
				t.Errorf("error %q should name the file and contain %q", msg, tc.want)
			}
			// LoadOrCreate must not mint over a damaged file.
			if _, created, err := identity.LoadOrCreate(home, ""); err == nil || created {
				t.Errorf("LoadOrCreate: created=%v err=%v, want the load error", created, err)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Error("damaged file was replaced")
			}
		})
	}
}

func TestLoadAcceptsEquivalentEncodings(t *testing.T) {
	home := t.TempDir()
	id := mustCreate(t, home, "n")
	rewrite(t, home, func(m map[string]any) {
		m["nodeId"] = strings.ToUpper(id.NodeID)
		m["x25519Public"] = e2e.EncodePublicKeyRaw(id.X25519.PublicKey())
		m["ed25519Seed"] = base64.StdEncoding.EncodeToString(id.Ed25519.Seed())
		m["futureMember"] = true
	})
	got, err := identity.Load(home)
	if err != nil {
		t.Fatal(err)
	}
	if got.NodeID != id.NodeID || !got.Ed25519.Equal(id.Ed25519) {
		t.Errorf("loaded %s, want %s with the same key", got.NodeID, id.NodeID)
	}
}

func TestLoadOrCreate(t *testing.T) {
	home := filepath.Join(t.TempDir(), "h")
	first, created, err := identity.LoadOrCreate(home, "one")
	if err != nil || !created {
		t.Fatalf("first call: created=%v err=%v", created, err)
	}
	second, created, err := identity.LoadOrCreate(home, "two")
	if err != nil || created {
		t.Fatalf("second call: created=%v err=%v", created, err)
	}
	if second.NodeID != first.NodeID || second.Name != "one" {
		t.Errorf("second call returned %s %q, want the existing %s %q", second.NodeID, second.Name, first.NodeID, "one")
	}
}

func TestLoadSeedFile(t *testing.T) {
	seed := bytes.Repeat([]byte{0xfb, 0xef}, 16) // + / in std base64, - _ in url
	want := ed25519.NewKeyFromSeed(seed)
	for _, tc := range []struct {
		name    string
		content string
		ok      bool
	}{
		{"base64url", base64.RawURLEncoding.EncodeToString(seed), true},
		{"base64url with newline", base64.RawURLEncoding.EncodeToString(seed) + "\n", true},
		{"padded std with spaces", "  " + base64.StdEncoding.EncodeToString(seed) + " \r\n", true},
		{"empty", "", false},
		{"16 bytes", base64.RawURLEncoding.EncodeToString(seed[:16]), false},
		{"64-byte private key", base64.RawURLEncoding.EncodeToString(want), false},
		{"not base64", "this is not a key", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "seed")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := identity.LoadSeedFile(path)
			if !tc.ok {
				if err == nil || !strings.Contains(err.Error(), path) {
					t.Fatalf("got %v, want an error naming %s", err, path)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(want) {
				t.Error("wrong key")
			}
		})
	}
	if _, err := identity.LoadSeedFile(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v, want fs.ErrNotExist", err)
	}
}

func TestDefaultHome(t *testing.T) {
	t.Setenv(identity.HomeEnv, "/srv/cmb")
	if h, err := identity.DefaultHome(); err != nil || h != "/srv/cmb" {
		t.Errorf("with %s set: %q, %v", identity.HomeEnv, h, err)
	}
	t.Setenv(identity.HomeEnv, "")
	t.Setenv("HOME", "/home/u")
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		return
	}
	if h, err := identity.DefaultHome(); err != nil || h != filepath.Join("/home/u", ".cmbnode") {
		t.Errorf("default: %q, %v", h, err)
	}
}
