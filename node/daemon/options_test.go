package daemon

import (
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node/config"
	"github.com/cmbnode/cmbnode/store"
)

// The trust settings of config.toml reach the node and its store:
// strict_signatures (on by default) and max_clock_skew.
func TestConfigTrustSettingsReachTheNode(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	home := t.TempDir()
	cfg, err := config.Load(home)
	if err != nil {
		t.Fatal(err)
	}
	o, err := nodeOptions(home, cfg, nil, log, store.Options{}, "test")
	if err != nil {
		t.Fatal(err)
	}
	if o.AllowUnsigned || o.StoreOptions.MaxClockSkew != 5*time.Minute {
		t.Fatalf("defaults: AllowUnsigned %v, MaxClockSkew %v; want false, 5m", o.AllowUnsigned, o.StoreOptions.MaxClockSkew)
	}
	if err := os.WriteFile(config.Path(home), []byte("strict_signatures = false\nmax_clock_skew = \"90s\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err = config.Load(home); err != nil {
		t.Fatal(err)
	}
	if o, err = nodeOptions(home, cfg, nil, log, store.Options{}, "test"); err != nil {
		t.Fatal(err)
	}
	if !o.AllowUnsigned || o.StoreOptions.MaxClockSkew != 90*time.Second {
		t.Fatalf("strict_signatures = false, max_clock_skew = 90s: AllowUnsigned %v, MaxClockSkew %v", o.AllowUnsigned, o.StoreOptions.MaxClockSkew)
	}
	// A store option a caller set wins over the file.
	if o, _ = nodeOptions(home, cfg, nil, log, store.Options{MaxClockSkew: time.Minute}, "test"); o.StoreOptions.MaxClockSkew != time.Minute {
		t.Fatalf("a caller's MaxClockSkew: %v", o.StoreOptions.MaxClockSkew)
	}
}
