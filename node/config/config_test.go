package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestWriteThenLoadRoundTrips(t *testing.T) {
	home := t.TempDir()
	c := Default()
	c.Group = "alpha.prod"
	c.Bootstrap = []string{"/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWHFZ72yxoVoCZbvvTaV5okRTM2P66j2AukkhjHU3FNhPB"}
	c.Retention.Duration = 720 * time.Hour
	c.CGPHTTP = "127.0.0.1:7474"
	if err := Write(home, c); err != nil {
		t.Fatal(err)
	}
	got, err := Load(home)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, c)
	}
	if err := Write(home, c); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second write: %v", err)
	}
	data, _ := os.ReadFile(Path(home))
	if strings.Count(string(data), "\n#") < 8 {
		t.Fatalf("rendered config is not commented:\n%s", data)
	}
}

func TestLoadDefaultsAndErrors(t *testing.T) {
	home := t.TempDir()
	c, err := Load(home)
	if err != nil || !reflect.DeepEqual(c, Default()) {
		t.Fatalf("missing file: %+v %v", c, err)
	}
	for name, body := range map[string]string{
		"unknown key": "grup = \"alpha\"\n",
		"bad group":   "group = \"Alpha\"\n",
		"bad toml":    "group = \n",
		"bad dur":     "retention = \"forever\"\n",
		"bad level":   "log_level = \"loud\"\n",
	} {
		os.WriteFile(filepath.Join(home, FileName), []byte(body), 0o600)
		if _, err := Load(home); err == nil || !strings.Contains(err.Error(), FileName) {
			t.Errorf("%s: err = %v, want an error naming the file", name, err)
		}
	}
}

// TestCGPHTTPTokenSetting: cgp_http_token is a commented entry until set,
// round-trips when set, and must be a usable bearer token.
func TestCGPHTTPTokenSetting(t *testing.T) {
	home := t.TempDir()
	c := Default()
	rendered := Render(c)
	if !strings.Contains(rendered, "\n# cgp_http_token = ") || strings.Contains(rendered, "\ncgp_http_token") {
		t.Fatalf("unset token is not a commented entry:\n%s", rendered)
	}
	c.CGPHTTPToken = "configured-token-0123456789abcdef0123"
	if err := Write(home, c); err != nil {
		t.Fatal(err)
	}
	got, err := Load(home)
	if err != nil || got.CGPHTTPToken != c.CGPHTTPToken {
		t.Fatalf("round trip: %q %v", got.CGPHTTPToken, err)
	}
	for name, tok := range map[string]string{"short": "abc", "spaces": "configured token 0123456789abcdef0123"} {
		os.WriteFile(Path(home), []byte("cgp_http_token = \""+tok+"\"\n"), 0o600)
		_, err := Load(home)
		if err == nil || !strings.Contains(err.Error(), "cgp_http_token") || !strings.Contains(err.Error(), FileName) || strings.Contains(err.Error(), tok) {
			t.Errorf("%s token: %v", name, err)
		}
	}
}

// TestCGPHTTPTokenRefusedInLooseConfig: a token in a config.toml others can
// read is no secret, so the file is refused until it is 0600; without a
// token the same file loads.
func TestCGPHTTPTokenRefusedInLooseConfig(t *testing.T) {
	home := t.TempDir()
	path := Path(home)
	tok := "configured-token-0123456789abcdef0123"
	if err := os.WriteFile(path, []byte("cgp_http_token = \""+tok+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(home)
	if !errors.Is(err, ErrInsecure) || !strings.Contains(err.Error(), "chmod 600 "+path) || strings.Contains(err.Error(), tok) {
		t.Fatalf("token in a 0644 config: %v", err)
	}
	if err := os.WriteFile(path, []byte("mdns = false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(home); err != nil {
		t.Fatalf("0644 config without a token: %v", err)
	}
}

// strict_signatures is on by default and max_clock_skew 5 minutes; both are
// written into the commented file and can be set.
func TestStrictSignaturesSetting(t *testing.T) {
	if !Default().StrictSignatures {
		t.Fatal("strict_signatures is off by default")
	}
	home := t.TempDir()
	if err := Write(home, Default()); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(Path(home))
	if !strings.Contains(string(data), "\nstrict_signatures = true\n") {
		t.Fatalf("rendered config lacks strict_signatures:\n%s", data)
	}
	if !strings.Contains(string(data), "\nmax_clock_skew = \"5m0s\"\n") {
		t.Fatalf("rendered config lacks max_clock_skew:\n%s", data)
	}
	os.WriteFile(Path(home), []byte("strict_signatures = false\nmax_clock_skew = \"90s\"\n"), 0o600)
	c, err := Load(home)
	if err != nil || c.StrictSignatures || c.MaxClockSkew.Duration != 90*time.Second {
		t.Fatalf("strict_signatures = false, max_clock_skew = 90s: %+v %v", c, err)
	}
}

// peer_target is written with its default, read back, and bounded.
func TestPeerTargetSetting(t *testing.T) {
	home := t.TempDir()
	if err := Write(home, Default()); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(Path(home))
	if !strings.Contains(string(data), "\npeer_target = 32\n") {
		t.Fatalf("rendered config lacks peer_target:\n%s", data)
	}
	os.WriteFile(Path(home), []byte("peer_target = 8\n"), 0o600)
	if c, err := Load(home); err != nil || c.PeerTarget != 8 {
		t.Fatalf("peer_target = 8: %+v %v", c.PeerTarget, err)
	}
	for _, bad := range []string{"0", "-3", "5000"} {
		os.WriteFile(Path(home), []byte("peer_target = "+bad+"\n"), 0o600)
		if _, err := Load(home); err == nil || !strings.Contains(err.Error(), "peer_target "+bad+": use a number of members from 1 to 1024") {
			t.Errorf("peer_target = %s: %v", bad, err)
		}
	}
}

// Addresses are checked when settings are: a typo fails at load, not
// later inside the mesh.
func TestValidateChecksAddresses(t *testing.T) {
	for name, set := range map[string]func(*Config){
		"listen":    func(c *Config) { c.Listen = []string{"garbage"} },
		"bootstrap": func(c *Config) { c.Bootstrap = []string{"/ip4/127.0.0.1/tcp/4001"} },
		"cgp_http":  func(c *Config) { c.CGPHTTP = "7474" },
		"metrics":   func(c *Config) { c.Metrics = "localhost" },
	} {
		c := Default()
		set(&c)
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), name+":") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if c := Default(); c.Validate() != nil {
		t.Fatalf("defaults: %v", c.Validate())
	}
}
