package test

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// hasLine reports whether some line of log contains every one of parts.
func hasLine(log string, parts ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

var logClock = regexp.MustCompile(`time="(\d\d:\d\d:\d\d\.\d\d\d)"`)

// logLineTime is the time of the first text-format log line of log that
// contains every one of parts. The line carries a local clock time of
// day; the date is the one that puts it nearest to now.
func logLineTime(t *testing.T, log string, parts ...string) time.Time {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if !hasLine(line, parts...) {
			continue
		}
		m := logClock.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("log line without a time: %s", line)
		}
		c, err := time.ParseInLocation("15:04:05.000", m[1], time.Local)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		at := time.Date(now.Year(), now.Month(), now.Day(), c.Hour(), c.Minute(), c.Second(), c.Nanosecond(), time.Local)
		switch {
		case at.Sub(now) > 12*time.Hour:
			at = at.AddDate(0, 0, -1)
		case now.Sub(at) > 12*time.Hour:
			at = at.AddDate(0, 0, 1)
		}
		return at
	}
	t.Fatalf("no log line with %q:\n%s", parts, tail(log, 3000))
	return time.Time{}
}
