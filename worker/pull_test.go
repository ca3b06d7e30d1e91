package worker

import (
	"testing"
	"time"
)

// The dispatcher sets no timer when nothing is due, so a worker whose
// slots are all busy, or all covered by requests out, sleeps until an
// event; it looks again at a request's deadline, at the end of a hold,
// and every retryEvery while waiting slots could not be covered.
func TestFeederNextCheck(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	w := func(n int) []*waiter { return make([]*waiter, n) }
	for _, tc := range []struct {
		name    string
		waiters int
		lanes   [feedLanes]*pullReq
		hold    time.Time
		want    time.Duration // -1: nothing due
	}{
		{name: "all slots busy", want: -1},
		{name: "waiting slots covered", waiters: 3,
			lanes: [feedLanes]*pullReq{{batch: 3, deadline: now.Add(12 * time.Second)}}, want: 12 * time.Second},
		{name: "the earlier deadline", waiters: 3,
			lanes: [feedLanes]*pullReq{{batch: 2, deadline: now.Add(12 * time.Second)}, {batch: 1, deadline: now.Add(5 * time.Second)}}, want: 5 * time.Second},
		{name: "a request given up as overdue", waiters: 1,
			lanes: [feedLanes]*pullReq{{batch: 1, deadline: now.Add(-time.Second)}}, want: 0},
		{name: "uncovered, a lane free", waiters: 4,
			lanes: [feedLanes]*pullReq{{batch: 3, deadline: now.Add(12 * time.Second)}}, want: retryEvery},
		{name: "uncovered, both lanes out", waiters: 4,
			lanes: [feedLanes]*pullReq{{batch: 2, deadline: now.Add(12 * time.Second)}, {batch: 1, deadline: now.Add(11 * time.Second)}}, want: 11 * time.Second},
		{name: "held after a refusal", waiters: 1, hold: now.Add(100 * time.Millisecond), want: 100 * time.Millisecond},
		{name: "hold over", waiters: 1, hold: now.Add(-time.Millisecond), want: retryEvery},
	} {
		f := &feeder{waiters: w(tc.waiters), holdUntil: tc.hold}
		for k, r := range tc.lanes {
			f.lanes[k].cur = r
		}
		d, ok := f.nextCheck(now)
		if !ok {
			d = -1
		}
		if d != tc.want {
			t.Errorf("%s: next check in %v, want %v", tc.name, d, tc.want)
		}
	}
}
