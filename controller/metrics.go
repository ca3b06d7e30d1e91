package controller

import "github.com/evoq/evoq/schema"

// Metrics receives a run's figures for a monitoring system; the evoq
// binary's implementation exports them to Prometheus. It is an interface so
// that the controller depends on no exporter, and a program that embeds the
// controller can feed its own. The controller calls it from its own
// goroutine, once per counted result, so an implementation must not block:
// a slow exporter would slow the fold.
type Metrics interface {
	// Counted is called once for each design's counted terminal result, in
	// stream order, including those replayed at start; a duplicate result
	// the fold drops is not passed.
	Counted(*schema.Result)
	// Observe is called on every tick of the controller's loop, at most a
	// second apart, with the run's gauges.
	Observe(Snapshot)
}

// Snapshot is the controller's state at one moment, for Metrics.
type Snapshot struct {
	// Queued is the number of designs waiting on the work queue for a
	// slot; 0 when the broker did not answer.
	Queued int
	// InFlight is the number of designs published and without a terminal
	// result.
	InFlight int
	// SlotsLive and SlotsBusy are the slots with a recent heartbeat, and
	// those of them evaluating a design; quarantined slots are neither.
	SlotsLive, SlotsBusy int
	// SlotsQuarantined are the live workers' slots that are quarantined:
	// they take no designs.
	SlotsQuarantined int
	// Retries is the number of failed attempts retried so far, replayed
	// ones included.
	Retries int
	// Budget is the number of designs the run evaluates.
	Budget int
	// Checkpoints is the number of checkpoints in the run's store, as
	// the controller counts them.
	Checkpoints int
	// Best is the best fitness so far; nil until a design evaluated ok.
	Best *float64
	// Front is the size of the pool's front and Hypervolume its
	// hypervolume, in a run of several objectives; nil Hypervolume while
	// the reference point is not known, or for a run of one fitness.
	Front       int
	Hypervolume *float64
}
