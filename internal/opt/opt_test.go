package opt

import (
	"testing"
	"time"
)

func TestDefault(t *testing.T) {
	n, d, s := 0, -time.Second, ""
	Default(&n, 7)
	Default(&d, time.Minute)
	Default(&s, "x")
	if n != 7 || d != time.Minute || s != "x" {
		t.Fatalf("unset values not defaulted: %d %v %q", n, d, s)
	}
	n, s = 3, "y"
	Default(&n, 7)
	Default(&s, "x")
	if n != 3 || s != "y" {
		t.Fatalf("set values overwritten: %d %q", n, s)
	}
}
