package cgp

import (
	"fmt"
	"time"
)

// TimeLayout is the one precision we emit (F4): UTC, millisecond fraction,
// uppercase T and Z. CMB createdAt is unix milliseconds, so nothing is lost.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// FormatTime renders t in the F4 profile at millisecond precision.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

// ParseTime checks the F4 grammar YYYY-MM-DDTHH:MM:SS(.f+)?Z and the
// calendar, then returns the instant. The grammar check comes first because
// time.Parse alone accepts offsets, lowercase and short fractions we must
// refuse; comparing parsed instants (never strings) is what makes
// "…:00.5Z" later than "…:00Z".
func ParseTime(s string) (time.Time, error) {
	if !IsTimestamp(s) {
		return time.Time{}, fmt.Errorf("%q is not a UTC timestamp YYYY-MM-DDTHH:MM:SS[.f]Z", s)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		// Leap second 60 is grammatical but time.Parse refuses it; clamp so
		// ordering stays sane instead of rejecting a valid F4 value.
		if s[17:19] == "60" {
			alt := s[:17] + "59" + s[19:]
			if t2, err2 := time.Parse(time.RFC3339Nano, alt); err2 == nil {
				return t2.Add(time.Second), nil
			}
		}
		return time.Time{}, fmt.Errorf("%q is not a calendar date/time: %w", s, err)
	}
	return t, nil
}

// IsTimestamp reports whether s matches the F4 grammar and a valid calendar
// date (months 1-12, days per month with leap years, hour<=23, minute<=59,
// second<=60).
func IsTimestamp(s string) bool {
	if len(s) < 20 || s[len(s)-1] != 'Z' {
		return false
	}
	digits := func(i, n int) (int, bool) {
		v := 0
		for k := i; k < i+n; k++ {
			c := s[k]
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		return v, true
	}
	if s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return false
	}
	year, ok1 := digits(0, 4)
	month, ok2 := digits(5, 2)
	day, ok3 := digits(8, 2)
	hour, ok4 := digits(11, 2)
	minute, ok5 := digits(14, 2)
	sec, ok6 := digits(17, 2)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return false
	}
	rest := s[19 : len(s)-1]
	if rest != "" {
		if len(rest) < 2 || rest[0] != '.' {
			return false
		}
		if _, ok := digits(20, len(rest)-1); !ok {
			return false
		}
	}
	if month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || sec > 60 {
		return false
	}
	return day <= daysIn(year, month)
}

func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
