package controller

import (
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

func TestAlive(t *testing.T) {
	t.Parallel()
	seen := epoch
	cases := []struct {
		name    string
		leaving bool
		after   time.Duration
		want    bool
	}{
		{name: "just heard", after: 0, want: true},
		{name: "within three intervals", after: 2900 * time.Millisecond, want: true},
		{name: "three intervals silent", after: 3 * time.Second, want: false},
		{name: "leaving", leaving: true, after: 0, want: false},
	}
	for _, tc := range cases {
		p := schema.Presence{Worker: "w", Slots: 1, Interval: time.Second, Leaving: tc.leaving}
		if got := Alive(p, seen, seen.Add(tc.after)); got != tc.want {
			t.Errorf("%s: Alive = %v, want %v", tc.name, got, tc.want)
		}
	}
}
