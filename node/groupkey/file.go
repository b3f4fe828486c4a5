package groupkey

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cmbnode/cmbnode/group"
	"github.com/cmbnode/cmbnode/node/secretfile"
)

// A home keeps each private group's secrets in groups/<name>/, one file per
// epoch, <epoch>.key: JSON, mode 0600, written once through secretfile (so
// rotation never rewrites a file a running daemon is reading) and read only
// while private. The directory is 0700.
const (
	dirName     = "groups"
	maxFileSize = 1024
)

type fileV1 struct {
	V       int    `json:"v"`
	Group   string `json:"group"`
	ID      string `json:"id"`      // hex
	Epoch   uint32 `json:"epoch"`   // 1, 2, …
	Secret  string `json:"secret"`  // base64url, no padding
	Created int64  `json:"created"` // Unix ms
}

// Dir is where home keeps the secrets of group name.
func Dir(home, name string) string { return filepath.Join(home, dirName, name) }

func epochPath(home, name string, n uint32) string {
	return filepath.Join(Dir(home, name), strconv.FormatUint(uint64(n), 10)+".key")
}

// LoadGroup reads every epoch home holds for name. No directory or no
// epoch file is ErrNoSecret; a file that is unreadable, not private, or
// names another group or id is an error naming the file.
func LoadGroup(home, name string) (Group, error) {
	if err := group.Validate(name); err != nil {
		return Group{}, err
	}
	dir := Dir(home, name)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return Group{}, fmt.Errorf("group %s: %w in %s", name, ErrNoSecret, dir)
	}
	if err != nil {
		return Group{}, err
	}
	g := Group{Name: name}
	seenID := false
	for _, de := range ents {
		fn := de.Name()
		if strings.HasPrefix(fn, ".") || !strings.HasSuffix(fn, ".key") {
			continue // temp files of an interrupted write, anything else
		}
		path := filepath.Join(dir, fn)
		data, err := secretfile.Read(path, maxFileSize)
		if err != nil {
			return Group{}, fmt.Errorf("group secret %s: %w", path, err)
		}
		id, e, err := parseFile(data, name)
		if err != nil {
			return Group{}, fmt.Errorf("group secret %s: %w", path, err)
		}
		if fn != strconv.FormatUint(uint64(e.N), 10)+".key" {
			return Group{}, fmt.Errorf("group secret %s holds epoch %d: the file name must be %d.key", path, e.N, e.N)
		}
		if seenID && id != g.ID {
			return Group{}, fmt.Errorf("group secret %s: %w (its id differs from the other epochs')", path, ErrOtherGroup)
		}
		g.ID, seenID = id, true
		g.Epochs = append(g.Epochs, e)
	}
	if len(g.Epochs) == 0 {
		return Group{}, fmt.Errorf("group %s: %w in %s", name, ErrNoSecret, dir)
	}
	return g, nil
}

func parseFile(data []byte, name string) (ID, Epoch, error) {
	var f fileV1
	var id ID
	if err := json.Unmarshal(data, &f); err != nil {
		return id, Epoch{}, fmt.Errorf("not valid JSON: %w", err)
	}
	if f.V != 1 {
		return id, Epoch{}, fmt.Errorf("version %d, want 1", f.V)
	}
	if f.Group != name {
		return id, Epoch{}, fmt.Errorf("names group %q, not %q", f.Group, name)
	}
	raw, err := hex.DecodeString(f.ID)
	if err != nil || len(raw) != IDSize {
		return id, Epoch{}, fmt.Errorf("id is not %d hex-encoded bytes", IDSize)
	}
	copy(id[:], raw)
	sec, err := base64.RawURLEncoding.DecodeString(f.Secret)
	if err != nil || len(sec) != SecretSize {
		return id, Epoch{}, fmt.Errorf("secret is not %d base64url bytes", SecretSize)
	}
	if f.Epoch == 0 || f.Created <= 0 {
		return id, Epoch{}, errors.New("epoch and created must be positive")
	}
	e := Epoch{N: f.Epoch, Created: time.UnixMilli(f.Created)}
	copy(e.Secret[:], sec)
	return id, e, nil
}

func writeEpoch(home, name string, id ID, e Epoch) error {
	dir := Dir(home, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(fileV1{
		V: 1, Group: name, ID: hex.EncodeToString(id[:]), Epoch: e.N,
		Secret: base64.RawURLEncoding.EncodeToString(e.Secret[:]), Created: e.Created.UnixMilli(),
	})
	if err != nil {
		return err
	}
	return secretfile.WriteNew(epochPath(home, name, e.N), append(data, '\n'))
}

// Create makes a new private group name in home: a random id and epoch-1
// secret. A home that already holds a group of that name is refused
// (ErrOtherGroup), so a secret is never replaced by accident.
func Create(home, name string, now time.Time) (Group, error) {
	if _, err := LoadGroup(home, name); err == nil {
		return Group{}, fmt.Errorf("group %s: %w (%s)", name, ErrOtherGroup, Dir(home, name))
	} else if !errors.Is(err, ErrNoSecret) {
		return Group{}, err
	}
	g, err := NewGroup(name, now)
	if err != nil {
		return Group{}, err
	}
	if err := writeEpoch(home, name, g.ID, g.Epochs[0]); err != nil {
		return Group{}, fmt.Errorf("write the group secret: %w", err)
	}
	return g, nil
}

// Rotate adds a new epoch with a fresh random secret to the group home
// holds under name, and returns the group with it.
func Rotate(home, name string, now time.Time) (Group, Epoch, error) {
	g, err := LoadGroup(home, name)
	if err != nil {
		return Group{}, Epoch{}, err
	}
	var top uint32
	for _, e := range g.Epochs {
		top = max(top, e.N)
	}
	e, err := newEpoch(top+1, now)
	if err != nil {
		return Group{}, Epoch{}, err
	}
	if err := writeEpoch(home, name, g.ID, e); err != nil {
		return Group{}, Epoch{}, fmt.Errorf("write the new group secret: %w", err)
	}
	g.Epochs = append(g.Epochs, e)
	return g, e, nil
}

// Join stores epoch e of the group (name, id) in home. It reports whether
// the epoch was new. A home holding another group of that name is refused
// with ErrOtherGroup unless replace is set; then that group's directory is
// moved aside to groups/<name>.replaced-<unix ms> (kept, never deleted).
func Join(home, name string, id ID, e Epoch, replace bool) (added bool, err error) {
	g, err := LoadGroup(home, name)
	switch {
	case errors.Is(err, ErrNoSecret):
	case err != nil && !replace:
		return false, err
	case err == nil && g.ID != id && !replace:
		return false, fmt.Errorf("group %s: %w (%s)", name, ErrOtherGroup, Dir(home, name))
	case err == nil && g.ID == id:
		for _, have := range g.Epochs {
			if have.N != e.N {
				continue
			}
			if have.Secret != e.Secret {
				return false, fmt.Errorf("group %s epoch %d: %w (this home holds another secret for it)", name, e.N, ErrOtherGroup)
			}
			return false, nil
		}
	default: // replacing another group, or an unreadable one
		aside := Dir(home, name) + ".replaced-" + strconv.FormatInt(time.Now().UnixMilli(), 10)
		if err := os.Rename(Dir(home, name), aside); err != nil {
			return false, fmt.Errorf("move the old group secrets aside: %w", err)
		}
	}
	if err := writeEpoch(home, name, id, e); err != nil {
		return false, fmt.Errorf("write the group secret: %w", err)
	}
	return true, nil
}

// Load builds the keyring for group name from home's secret files. Reload
// later picks up epochs added since (a rotation, a join).
func Load(home, name string, o Options) (*Keyring, error) {
	g, err := LoadGroup(home, name)
	if err != nil {
		return nil, err
	}
	k, err := New(g, o)
	if err != nil {
		return nil, err
	}
	k.home = home
	return k, nil
}

// Reload reads the home's secret files again and adds the epochs not yet
// held. It returns the epochs added. A keyring built in memory has nothing
// to reload. Files of another group id are an error and change nothing.
func (k *Keyring) Reload() ([]uint32, error) {
	if k.home == "" {
		return nil, nil
	}
	g, err := LoadGroup(k.home, k.name)
	if err != nil {
		return nil, err
	}
	if g.ID != k.id {
		return nil, fmt.Errorf("group %s: %w (the secrets in %s changed to another group; restart to use it)", k.name, ErrOtherGroup, Dir(k.home, k.name))
	}
	before := k.Epochs()
	if err := k.AddEpochs(g.Epochs...); err != nil {
		return nil, err
	}
	var added []uint32
	for _, n := range k.Epochs() {
		if !containsEpoch(before, n) {
			added = append(added, n)
		}
	}
	return added, nil
}

// AddEpochs adds epochs to the keyring (tests, and Reload).
func (k *Keyring) AddEpochs(es ...Epoch) error { return k.add(es) }

func containsEpoch(xs []uint32, n uint32) bool {
	for _, x := range xs {
		if x == n {
			return true
		}
	}
	return false
}
