package controller

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// The warnings come once no slot has been live for the alarm period, then
// at doubling intervals up to NoSlotRepeatMax; a slot that joins resets
// the schedule.
func TestNoSlotAlarmSchedule(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	const alarm = 30 * time.Second
	var a noSlotAlarm
	var warned []time.Duration // offsets from t0
	for s := 0; s <= 1200; s++ {
		now := t0.Add(time.Duration(s) * time.Second)
		if due, none := a.due(now, 0, alarm); due {
			if none != time.Duration(s)*time.Second {
				t.Fatalf("at %ds: no slot for %s, want %ds", s, none, s)
			}
			warned = append(warned, time.Duration(s)*time.Second)
		}
	}
	// 30 s, then gaps of 60 s, 120 s, 240 s, then 300 s (the cap).
	want := []time.Duration{30 * time.Second, 90 * time.Second, 210 * time.Second, 450 * time.Second, 750 * time.Second, 1050 * time.Second}
	if !reflect.DeepEqual(warned, want) {
		t.Fatalf("warnings at %v, want %v", warned, want)
	}

	later := t0.Add(time.Hour)
	if due, _ := a.due(later, 4, alarm); due {
		t.Fatal("warned with 4 live slots")
	}
	if due, _ := a.due(later.Add(29*time.Second), 0, alarm); due {
		t.Fatal("warned before the alarm period after slots left")
	}
	if due, none := a.due(later.Add(59*time.Second), 0, alarm); !due || none != 30*time.Second {
		t.Fatalf("after slots left: due %v after %s, want a warning after 30s", due, none)
	}

	var off noSlotAlarm
	for s := 0; s < 600; s += 10 {
		if due, _ := off.due(t0.Add(time.Duration(s)*time.Second), 0, IdleAlarmOff); due {
			t.Fatal("warned with the alarm off")
		}
	}
	// An alarm period above the cap is not shortened by it.
	long := noSlotAlarm{}
	long.due(t0, 0, 10*time.Minute)
	if due, _ := long.due(t0.Add(10*time.Minute), 0, 10*time.Minute); !due {
		t.Fatal("no first warning after a 10m alarm period")
	}
	if due, _ := long.due(t0.Add(19*time.Minute), 0, 10*time.Minute); due {
		t.Fatal("repeated sooner than the alarm period")
	}
}

func TestLiveRuns(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	hb := func(run, worker string, slots int, age time.Duration, leaving bool) Heartbeat {
		return Heartbeat{Run: run, Stored: now.Add(-age),
			Presence: schema.Presence{Run: run, Worker: worker, Slots: slots, Interval: time.Second, Leaving: leaving}}
	}
	got := LiveRuns([]Heartbeat{
		hb("raal", "n1", 6, 0, false),
		hb("real", "own", 6, 0, false), // the run itself: its own count
		hb("b", "n2", 2, time.Second, false),
		hb("raal", "n3", 6, 2*time.Second, false),
		hb("raal", "dead", 6, time.Minute, false), // silent past 3 heartbeats
		hb("c", "bye", 1, 0, true),                // leaving
	}, "real", now)
	want := []RunWorkers{{Run: "b", Workers: 1, Slots: 2}, {Run: "raal", Workers: 2, Slots: 12}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("LiveRuns = %v, want %v", got, want)
	}
	if got := LiveRuns(nil, "real", now); len(got) != 0 {
		t.Fatalf("LiveRuns of an empty bucket = %v", got)
	}
}

func TestDiagnoseNoSlot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		others            []RunWorkers
		err               error
		diagnosis, advice []string // each contained in what DiagnoseNoSlot says
	}{
		{name: "no worker anywhere",
			diagnosis: []string{"no live worker on this broker, for any run", "wait for a run of another name"},
			advice:    []string{"start workers for run real"}},
		{name: "workers serve another run", others: []RunWorkers{{Run: "raal", Workers: 92, Slots: 552}, {Run: "z", Workers: 1, Slots: 1}},
			diagnosis: []string{"workers serve other runs on this broker: raal (92 workers, 552 slots), z (1 workers, 1 slots)"},
			advice:    []string{"restart them for run real", "else start workers for run real"}},
		{name: "presence unreadable", err: errors.New("timeout"),
			diagnosis: []string{"cannot be read: timeout"}, advice: []string{"start workers for run real"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			diag, advice := DiagnoseNoSlot("real", tc.others, tc.err)
			for _, want := range tc.diagnosis {
				if !strings.Contains(diag, want) {
					t.Errorf("diagnosis %q lacks %q", diag, want)
				}
			}
			for _, want := range tc.advice {
				if !strings.Contains(advice, want) {
					t.Errorf("advice %q lacks %q", advice, want)
				}
			}
		})
	}
}
