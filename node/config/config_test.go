package config

import (
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
	c.Bootstrap = []string{"/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWabc"}
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
