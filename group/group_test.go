package group

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, ok := range []string{"default", "alpha", "team-a_b.prod", "0", strings.Repeat("a", MaxLen)} {
		if err := Validate(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Alpha", "a b", "ünïcode", "a/b", strings.Repeat("a", MaxLen+1), "tab\t"} {
		if err := Validate(bad); !errors.Is(err, ErrBadGroup) {
			t.Errorf("%q: err = %v, want ErrBadGroup", bad, err)
		}
	}
}

func TestNormalizeAndTopic(t *testing.T) {
	if Normalize("") != Default || Normalize("x") != "x" {
		t.Fatal("Normalize")
	}
	if Topic("alpha") == Topic("beta") || !strings.HasSuffix(Topic("alpha"), "/alpha") {
		t.Fatalf("topics: %s %s", Topic("alpha"), Topic("beta"))
	}
}
