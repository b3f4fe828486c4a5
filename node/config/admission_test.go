package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

// The [admission] table is written with its defaults, read back when
// edited, and a limit that is not positive is refused by name.
func TestAdmissionSettings(t *testing.T) {
	home := t.TempDir()
	if err := Write(home, Default()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(Path(home))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"[admission]", `max_future_skew = "1h0m0s"`, "author_rate = 100", "author_burst = 20000",
		"pending_per_author = 1000", `pending_ttl = "1h0m0s"`, `pending_retry_max = "10m0s"`, `roster_idle_ttl = "168h0m0s"`, "roster_max_idle = 1024"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the template lacks %q", want)
		}
	}
	edited := strings.Replace(string(b), "author_rate = 100", "author_rate = 2.5", 1)
	edited = strings.Replace(edited, `max_future_skew = "1h0m0s"`, `max_future_skew = "10m"`, 1)
	if err := os.WriteFile(Path(home), []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(home)
	if err != nil {
		t.Fatal(err)
	}
	if c.Admission.AuthorRate != 2.5 || c.Admission.MaxFutureSkew.Duration != 10*time.Minute || c.Admission.RosterMaxIdle != 1024 {
		t.Errorf("loaded %+v", c.Admission)
	}
	for name, set := range map[string]func(*Admission){
		"admission.author_rate":        func(a *Admission) { a.AuthorRate = 0 },
		"admission.author_burst":       func(a *Admission) { a.AuthorBurst = -1 },
		"admission.pending_per_author": func(a *Admission) { a.PendingPerAuthor = 0 },
		"admission.roster_max_idle":    func(a *Admission) { a.RosterMaxIdle = 0 },
		"admission.pending_ttl":        func(a *Admission) { a.PendingTTL = Duration{} },
		"admission.max_future_skew":    func(a *Admission) { a.MaxFutureSkew = Duration{} },
	} {
		c := Default()
		set(&c.Admission)
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), name+" ") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
