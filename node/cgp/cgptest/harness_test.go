package cgptest

import (
	"context"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node/cgp"
)

const schemaPath = "../../../fixtures/cgp/contextgraph-envelope.schema.json"

// TestMain lets the test binary double as the provider process: the
// harness spawns os.Args[0] with a cleared environment, so the mode rides
// in argv rather than an environment variable.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "cgp-provider" {
		os.Exit(RunProvider(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func providerTarget(mode string) *StdioTarget {
	return &StdioTarget{Label: "stdio:" + mode, Path: os.Args[0], Args: []string{"cgp-provider", mode}}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustPass are the checks that must be green (not merely not-red) against
// the honest engine: a skip here would hide a missing feature.
func assertHonest(t *testing.T, rep Report, mayskip ...string) {
	t.Helper()
	t.Log("\n" + rep.String())
	if f := rep.Failed(); len(f) > 0 {
		t.Fatalf("honest provider fails %d checks: %+v", len(f), f)
	}
	for _, name := range AllChecks() {
		c := rep.Get(name)
		if c.Name == "" {
			t.Errorf("check %s did not run", name)
			continue
		}
		if c.Status != Pass && !slices.Contains(mayskip, name) {
			t.Errorf("check %s is %s (%s), want pass", name, c.Status, c.Evidence)
		}
	}
}

func TestHonestEngineStdio(t *testing.T) {
	rep := Run(testCtx(t), providerTarget(ModeHonest), Options{SchemaPath: schemaPath})
	// No file:// provenance and no fingerprint: those two checks have
	// nothing to check for a memory provider without embeddings.
	assertHonest(t, rep, CheckProvenanceFixture, CheckEmbeddingFP)
}

func TestHonestEngineHTTP(t *testing.T) {
	e, _, err := NewEngine(CorpusSize, CorpusSeed)
	if err != nil {
		t.Fatal(err)
	}
	const token = "harness-token-0123456789abcdef"
	srv := httptest.NewServer(cgp.NewHTTPHandler(e, cgp.HTTPOptions{BearerToken: token}))
	defer srv.Close()
	rep := Run(testCtx(t), &HTTPTarget{Label: "http", URL: srv.URL + "/contextgraph", Token: token}, Options{SchemaPath: schemaPath})
	assertHonest(t, rep, CheckProvenanceFixture, CheckEmbeddingFP, CheckEOFClean)
}

// TestRedTeam proves every check bites: each misbehaviour mode turns its
// matching check red.
func TestRedTeam(t *testing.T) {
	modes := RedTeamModes()
	names := make([]string, 0, len(modes))
	for m := range modes {
		names = append(names, m)
	}
	sort.Strings(names)
	ctx := testCtx(t)
	for _, mode := range names {
		check := modes[mode]
		t.Run(mode, func(t *testing.T) {
			rep := Run(ctx, providerTarget(mode), Options{Only: []string{check}})
			got := rep.Get(check)
			if got.Status != Fail {
				t.Errorf("mode %s: check %s is %q (%s), want fail", mode, check, got.Status, got.Evidence)
			} else {
				t.Logf("%s → %s red: %s", mode, check, got.Evidence)
			}
		})
	}
}

// TestFixtureFrames runs the frame validator over the published fixtures:
// valid frames pass, the missing/blank citation frames fail F3.
func TestFixtureFrames(t *testing.T) {
	dir := "../../../fixtures/cgp/fixtures/contextgraph-1.0-draft/"
	for _, name := range []string{"context-frame.compact.valid.json", "context-frame.reference.valid.json"} {
		b, err := os.ReadFile(dir + name)
		if err != nil {
			t.Fatal(err)
		}
		frame := extractFrame(t, b)
		if p := ValidateFrame(frame); len(p) > 0 {
			t.Errorf("%s: %v", name, p)
		}
	}
	b, err := os.ReadFile(dir + "context-frame.missing-citation.invalid.json")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]jsonRaw{}
	mustUnmarshal(t, b, &cases)
	for name, raw := range cases {
		p := ValidateFrame(raw)
		if !containsF3(p) {
			t.Errorf("missing-citation/%s passed F3: %v", name, p)
		}
	}
}
