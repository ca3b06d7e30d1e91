package checkpoint

import (
	"testing"
	"time"
)

// SetClock makes Sweep age leftovers by now until the test ends.
func SetClock(t *testing.T, now func() time.Time) {
	old := timeNow
	timeNow = now
	t.Cleanup(func() { timeNow = old })
}
