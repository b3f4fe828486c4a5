package metrics_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"cmbnode/node"
	"cmbnode/node/identity"
	"cmbnode/node/metrics"
)

type extra struct{}

func (extra) WriteMetrics(w *metrics.Writer) {
	w.Map("x_total", "An extra family.", "counter", "reason", map[string]int64{`b"q`: 2, "a": 1})
}

func TestServe(t *testing.T) {
	home := t.TempDir()
	id, err := identity.Create(home, "m", nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Options{Home: home, Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	n.Counters.CountReject("bad-signature")
	s, err := metrics.Serve("127.0.0.1:0", metrics.Handler(n, extra{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp, err := http.Get("http://" + s.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("content type %q", ct)
	}
	for _, want := range []string{
		"# TYPE cmbnode_cmbs_rejected_total counter\n",
		`cmbnode_cmbs_rejected_total{reason="bad-signature"} 1` + "\n",
		"cmbnode_store_cmbs 0\n",
		`x_total{reason="a"} 1` + "\nx_total{reason=\"b\\\"q\"} 2\n",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
	if r, err := http.Post("http://"+s.Addr()+"/", "text/plain", nil); err != nil || r.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %v %v", r, err)
	}
}
