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

// SetCommitWait bounds Put's requests for a commit by d until the test
// ends.
func SetCommitWait(t *testing.T, d time.Duration) {
	old := commitWait
	commitWait = d
	t.Cleanup(func() { commitWait = old })
}
