package worker

import (
	"reflect"
	"testing"
)

func TestShareOut(t *testing.T) {
	t.Parallel()
	gpus := []string{"0", "1", "2"}
	cases := []struct {
		name       string
		gpus       []string
		slots      int
		perGPU     int
		slotsGiven bool
		workers    int
		want       []Share
	}{
		{name: "no GPUs, slots shared evenly", slots: 5, perGPU: 1, workers: 2,
			want: []Share{{Slots: 3}, {Slots: 2}}},
		{name: "one worker takes all", slots: 4, perGPU: 1, workers: 1, want: []Share{{Slots: 4}}},
		{name: "GPUs dealt round, slots follow them", gpus: gpus, slots: 3, perGPU: 1, workers: 2,
			want: []Share{{GPUs: []string{"0", "2"}, Slots: 2}, {GPUs: []string{"1"}, Slots: 1}}},
		{name: "slots per GPU", gpus: gpus, slots: 6, perGPU: 2, workers: 3,
			want: []Share{{GPUs: []string{"0"}, Slots: 2}, {GPUs: []string{"1"}, Slots: 2}, {GPUs: []string{"2"}, Slots: 2}}},
		{name: "slots given: shared evenly whatever the GPUs", gpus: gpus, slots: 7, perGPU: 1, slotsGiven: true, workers: 2,
			want: []Share{{GPUs: []string{"0", "2"}, Slots: 4}, {GPUs: []string{"1"}, Slots: 3}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ShareOut(tc.gpus, tc.slots, tc.perGPU, tc.slotsGiven, tc.workers)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ShareOut: %+v\nwant %+v", got, tc.want)
			}
			total := 0
			for _, s := range got {
				total += s.Slots
			}
			if (tc.slotsGiven || len(tc.gpus) == 0) && total != tc.slots {
				t.Fatalf("%d slots shared out of %d", total, tc.slots)
			}
		})
	}
}
