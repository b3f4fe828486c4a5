package cgp

import (
	"errors"
	"fmt"
	"math/big"
)

// Reasons a file range addresses nothing a verifier can digest (F17).
var (
	ErrRangeUnrecognised = errors.New("range is not in the L<n>[-<m>] grammar")
	ErrRangeInverted     = errors.New("range ends before it starts")
	ErrRangeStartPastEnd = errors.New("range starts past the last line")
)

// AddressRange returns the exact bytes of resource that a `file` provenance
// range addresses (SPEC §6.2.1, F17). A nil range is the whole resource.
// Lines split on LF only and include their LF; CR is content; an end past
// the last line clamps, and line numbers of any size are accepted so the
// meaning never depends on integer width.
func AddressRange(resource []byte, rng *string) ([]byte, error) {
	if rng == nil {
		return resource, nil
	}
	start, end, err := parseRange(*rng)
	if err != nil {
		return nil, err
	}
	// Line start offsets; a final LF does not open an empty extra line.
	var starts []int
	for i := 0; i < len(resource); {
		starts = append(starts, i)
		j := i
		for j < len(resource) && resource[j] != '\n' {
			j++
		}
		i = j + 1
	}
	n := big.NewInt(int64(len(starts)))
	if start.Cmp(n) > 0 {
		return nil, fmt.Errorf("%w: %q over %d lines", ErrRangeStartPastEnd, *rng, len(starts))
	}
	if end.Cmp(n) > 0 {
		end = n
	}
	s, e := int(start.Int64())-1, int(end.Int64())
	to := len(resource)
	if e < len(starts) {
		to = starts[e]
	}
	return resource[starts[s]:to], nil
}

func parseRange(r string) (start, end *big.Int, err error) {
	num := func(s string) (*big.Int, bool) {
		if s == "" || s[0] == '0' {
			return nil, false
		}
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return nil, false
			}
		}
		v, ok := new(big.Int).SetString(s, 10)
		return v, ok
	}
	if len(r) < 2 || r[0] != 'L' {
		return nil, nil, fmt.Errorf("%w: %q", ErrRangeUnrecognised, r)
	}
	body, endText, dash := r[1:], "", false
	for i := 0; i < len(body); i++ {
		if body[i] == '-' {
			body, endText, dash = r[1:1+i], r[2+i:], true
			break
		}
	}
	start, ok := num(body)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %q", ErrRangeUnrecognised, r)
	}
	end = start
	if dash {
		if end, ok = num(endText); !ok {
			return nil, nil, fmt.Errorf("%w: %q", ErrRangeUnrecognised, r)
		}
	}
	if end.Cmp(start) < 0 {
		return nil, nil, fmt.Errorf("%w: %q", ErrRangeInverted, r)
	}
	return start, end, nil
}
