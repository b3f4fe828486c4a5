package config

import (
	"os"
	"strings"
	"testing"
)

// TestRecallSettings: the template's [embeddings] and [svaf] tables parse
// back to the defaults; an encoder is built once a URL is set; an unknown
// verdict, field or bad threshold is refused.
func TestRecallSettings(t *testing.T) {
	home := t.TempDir()
	c := Default()
	if err := Write(home, c); err != nil {
		t.Fatal(err)
	}
	got, err := Load(home)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got.SVAF.Surface, ",") != "aligned,guarded,rejected" || got.SVAF.Freshness != c.SVAF.Freshness || got.Embeddings.URL != "" {
		t.Fatalf("loaded %+v %+v", got.SVAF, got.Embeddings)
	}
	if enc, err := got.Embeddings.Encoder(); err != nil || enc != nil {
		t.Fatalf("no url: encoder %v, %v", enc, err)
	}
	write := func(extra string) error {
		h := t.TempDir()
		if err := os.WriteFile(Path(h), []byte(extra), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(h)
		return err
	}
	if err := write("[embeddings]\nurl = \"http://127.0.0.1:11434/v1\"\nmodel = \"nomic-embed-text\"\ndimensions = 768\n"); err != nil {
		t.Fatalf("a valid encoder: %v", err)
	}
	for _, bad := range []string{
		"[embeddings]\nurl = \"http://127.0.0.1:11434/v1\"\nmodel = \"m\"\n", // no dimensions
		"[svaf]\nsurface = [\"admitted\"]\n",
		"[svaf]\nfield_weights = { focsu = 2 }\n",
		"[svaf]\naligned = 0.6\nguarded = 0.5\n",
	} {
		if err := write(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
