// Package schema defines every message evoq puts on the wire: designs, results,
// worker presence and run state, together with the subjects, streams and
// buckets that carry them.
//
// Messages are msgpack maps with short string keys and an explicit schema
// version "v". Decoding validates every field and returns errors that wrap
// ErrMalformed, ErrVersion or ErrInvalid, so that a bad message is reported,
// never acted on. SCHEMA.md in this directory documents the protocol for
// clients written in other languages.
//
// This package imports nothing else of evoq; everything may import it.
package schema

import (
	"math"
	"time"
)

// Version is the schema version written into every message. A decoder
// refuses any other version with ErrVersion.
const Version = 1

// MaxMessageSize is the largest encoded message evoq publishes or accepts:
// the embedded broker's max_payload (the NATS default, 1 MiB) and both
// streams' max_msg_size.
const MaxMessageSize = 1 << 20

// HeaderRoom is the part of a message kept for its NATS headers
// (Nats-Msg-Id and the like), which the broker counts against
// MaxMessageSize with the body: Marshal produces at most MaxBodySize, so
// that what it encodes can always be published.
const HeaderRoom = 4 << 10

// MaxBodySize is the largest body Marshal encodes.
const MaxBodySize = MaxMessageSize - HeaderRoom

// ResultRoom is the part of a message a result keeps for what it wraps
// around its evaluator's output: the design, echoed whole so that the
// results stream alone is the run's history, and the worker's fields
// (identity, host, slot, times, error). A design of a real search space
// takes a few KiB.
const ResultRoom = 64 << 10

// MaxResultLine is the longest result line an external evaluator may
// print, one-shot or persistent alike: a message less ResultRoom. A longer
// line could not be stored; the worker keeps only this much of it and
// records an error result naming its size and this limit. A line within
// it still gives an error result (result not storable, with its size and
// MaxMessageSize) when the result does not encode within a message:
// msgpack spends 9 bytes on every number, however short its JSON, and a
// design larger than ResultRoom leaves the metrics less room.
const MaxResultLine = MaxMessageSize - ResultRoom

// RunRoom is the part of a run's record (Run) kept for what it holds
// besides its search space's source: its settings, seeds and changes.
const RunRoom = 64 << 10

// MaxSpaceSource is the largest search space source (the YAML of
// --config) a run can have: the source travels whole in the run's record
// (Run.SpaceYAML), one message of at most MaxBodySize, less RunRoom.
const MaxSpaceSource = MaxBodySize - RunRoom

// InfeasibleFitness is the fitness recorded for an infeasible design:
// -MaxInt64, the value the evaluators of the original incident returned.
const InfeasibleFitness = float64(math.MinInt64)

// Origin says how a design was made.
type Origin string

// Origins of a design.
const (
	OriginRandom Origin = "random" // sampled uniformly from the search space
	OriginMutant Origin = "mutant" // a slightly altered clone of a pool member
	OriginSeed   Origin = "seed"   // copied from an earlier run
)

// Status is the terminal status of one evaluation. Every design ends in
// exactly one terminal result.
type Status string

// Terminal statuses.
const (
	StatusOK         Status = "ok"         // evaluated; Fitness is meaningful
	StatusInfeasible Status = "infeasible" // the design cannot be built or trained
	StatusError      Status = "error"      // the evaluator failed; Error says why
	StatusTimeout    Status = "timeout"    // the evaluator ran past its time limit
	StatusLost       Status = "lost"       // the design reached its redelivery limit
	// StatusStopped: the run's early-stopping rule stopped the evaluation
	// at a rung; Fitness is the last one it reported.
	StatusStopped Status = "stopped"
)

// Statuses lists every terminal status in a stable order.
var Statuses = []Status{StatusOK, StatusInfeasible, StatusError, StatusTimeout, StatusLost, StatusStopped}

// Valid reports whether s is one of the terminal statuses.
func (s Status) Valid() bool {
	for _, v := range Statuses {
		if s == v {
			return true
		}
	}
	return false
}

// Phase is the life-cycle phase of a run.
type Phase string

// Run phases.
const (
	PhaseStarting Phase = "starting" // controller up, waiting for slots
	PhaseRunning  Phase = "running"  // designs are being published
	PhaseDraining Phase = "draining" // budget published, waiting for its results
	PhaseDone     Phase = "done"     // every design of the budget has a terminal result
	// PhaseFailed: the controller stopped the run because its first
	// attempts all failed (Run.Failure says how); a controller started
	// on the run again continues it.
	PhaseFailed Phase = "failed"
)

// Design is one candidate to evaluate, published on DesignSubject(run).
type Design struct {
	V       int            `msgpack:"v" json:"v"`
	Run     string         `msgpack:"run" json:"run"`
	ID      string         `msgpack:"id" json:"id"`   // DesignID(run, seq)
	Seq     uint64         `msgpack:"seq" json:"seq"` // 1-based, dense within a run
	Genome  map[string]any `msgpack:"genome" json:"genome"`
	Parents []string       `msgpack:"parents,omitempty" json:"parents,omitempty"`
	Origin  Origin         `msgpack:"origin" json:"origin"`
	Created time.Time      `msgpack:"created" json:"created"`
	// Retry is 0 when the design is published the first time, and n when
	// the controller publishes it again for its n-th retry after an
	// attempt that failed (error or timeout): the same design, another
	// attempt, with the Nats-Msg-Id DesignMsgID gives it.
	Retry int `msgpack:"retry,omitempty" json:"retry,omitempty"`
	// AvoidHosts and AvoidWorkers name where earlier attempts of a retried
	// design failed: a worker on one of these hosts, or one of these
	// workers, hands the design back for another slot to take (see
	// SCHEMA.md, Retries). Empty when no other host or worker was live to
	// take it.
	AvoidHosts   []string `msgpack:"avoid_hosts,omitempty" json:"avoid_hosts,omitempty"`
	AvoidWorkers []string `msgpack:"avoid_workers,omitempty" json:"avoid_workers,omitempty"`
	// Inherit is the parent's checkpoint a mutant of a run with
	// inheritance starts from; nil when the run has none or the parent
	// stored none.
	Inherit *CheckpointRef `msgpack:"inherit,omitempty" json:"inherit,omitempty"`

	// wire is the encoding the design was received in (DecodeReceived):
	// a result echoes its design in these bytes instead of encoding the
	// genome's map again, which was a tenth of a worker's CPU on short
	// evaluations.
	wire []byte
}

// Avoids reports whether a worker with ID worker on host should hand d
// back rather than evaluate it: an earlier attempt failed there.
func (d *Design) Avoids(worker, host string) bool {
	for _, h := range d.AvoidHosts {
		if h == host {
			return true
		}
	}
	for _, w := range d.AvoidWorkers {
		if w == worker {
			return true
		}
	}
	return false
}

// Result is the terminal outcome of one design, published on
// ResultSubject(run). It carries its design so that the results stream alone
// is the run's whole history.
type Result struct {
	V        int            `msgpack:"v" json:"v"`
	Run      string         `msgpack:"run" json:"run"`
	DesignID string         `msgpack:"design_id" json:"design_id"`
	Design   Design         `msgpack:"design" json:"design"`
	Status   Status         `msgpack:"status" json:"status"`
	Fitness  float64        `msgpack:"fitness" json:"fitness"`
	Metrics  map[string]any `msgpack:"metrics,omitempty" json:"metrics,omitempty"`
	Worker   string         `msgpack:"worker" json:"worker"`
	Host     string         `msgpack:"host" json:"host"`
	Slot     int            `msgpack:"slot" json:"slot"`
	GPU      string         `msgpack:"gpu,omitempty" json:"gpu,omitempty"`
	Attempt  int            `msgpack:"attempt" json:"attempt"` // delivery count, from 1
	Start    time.Time      `msgpack:"start" json:"start"`
	Stop     time.Time      `msgpack:"stop" json:"stop"`
	// Gap is the time this slot spent between storing its previous result and
	// starting this design; -1 for a slot's first design.
	Gap   time.Duration `msgpack:"gap_ns" json:"gap_ns"`
	Error string        `msgpack:"error,omitempty" json:"error,omitempty"`
	// GPUUUID is the UUID of the slot's GPU (GPU-..., MIG-...), when the
	// worker knows it: GPU is an index, and index 0 is another GPU on
	// every node, so only the UUID follows a faulty GPU across nodes and
	// runs.
	GPUUUID string `msgpack:"gpu_uuid,omitempty" json:"gpu_uuid,omitempty"`
	// Exit and Signal say how an external evaluator's process ended with
	// this evaluation: its exit code, or the name of the signal that
	// killed it (SIGKILL), so that a node whose evaluators crash can be
	// told from designs that fail. Both are unset when no process ended: a
	// built-in evaluator, a persistent evaluator that answered and lives
	// on, a lost design. A pointer, because exit 0 is worth recording.
	Exit   *int   `msgpack:"exit,omitempty" json:"exit,omitempty"`
	Signal string `msgpack:"signal,omitempty" json:"signal,omitempty"`
	// Checkpoint is the checkpoint the evaluation stored, stored before
	// the result; nil when it wrote none. CheckpointError says why one it
	// wrote was not stored (larger than the run's limit, a store that
	// refused it): the result counts all the same.
	Checkpoint      *CheckpointRef `msgpack:"checkpoint,omitempty" json:"checkpoint,omitempty"`
	CheckpointError string         `msgpack:"checkpoint_error,omitempty" json:"checkpoint_error,omitempty"`
	// ResumedFrom is the step of the saved progress this attempt started
	// from (an earlier attempt's, stored as <design>.progress): 0 when it
	// started from scratch. ResumedSeconds is how long the design had
	// trained up to that step, over its earlier attempts: the slot-seconds
	// the resume did not repeat. ProgressStep is the last step whose
	// progress this attempt stored (0: none), which tells the controller
	// that the design has a progress object to delete.
	ResumedFrom    int64   `msgpack:"resumed_from,omitempty" json:"resumed_from,omitempty"`
	ResumedSeconds float64 `msgpack:"resumed_seconds,omitempty" json:"resumed_seconds,omitempty"`
	ProgressStep   int64   `msgpack:"progress_step,omitempty" json:"progress_step,omitempty"`
	// NoProgress says that the attempt's evaluator cannot save progress
	// at all (a built-in evaluator, which writes no files): a design it
	// evaluates again is not counted as retrained from scratch, since no
	// evaluator could have resumed it.
	NoProgress bool `msgpack:"no_progress,omitempty" json:"no_progress,omitempty"`
}

// Duration is the evaluation's wall time as measured by the worker.
func (r *Result) Duration() time.Duration { return r.Stop.Sub(r.Start) }

// Presence is a worker's heartbeat, stored in PresenceBucket under
// PresenceKey(run, worker).
type Presence struct {
	V         int       `msgpack:"v" json:"v"`
	Run       string    `msgpack:"run" json:"run"`
	Worker    string    `msgpack:"worker" json:"worker"`
	Host      string    `msgpack:"host" json:"host"`
	PID       int       `msgpack:"pid" json:"pid"`
	Slots     int       `msgpack:"slots" json:"slots"`
	Busy      int       `msgpack:"busy" json:"busy"`
	Done      int64     `msgpack:"done" json:"done"` // evaluations finished by this worker
	Started   time.Time `msgpack:"started" json:"started"`
	Heartbeat time.Time `msgpack:"heartbeat" json:"heartbeat"`
	// Interval is the heartbeat period; a presence older than three
	// intervals is stale.
	Interval time.Duration `msgpack:"interval_ns" json:"interval_ns"`
	Leaving  bool          `msgpack:"leaving,omitempty" json:"leaving,omitempty"`
	// Quarantined are the worker's slots (indexes, from 0) that the
	// controller quarantined and that take no more designs.
	Quarantined []int `msgpack:"quarantined,omitempty" json:"quarantined,omitempty"`
	// Warnings are conditions of the worker that the run's status and
	// summary show: its evaluator differs from the run's record, its
	// evaluator has not answered its first design, and the like.
	Warnings []string `msgpack:"warnings,omitempty" json:"warnings,omitempty"`
}

// Variation is a run's variation operators: a new design is, with
// probability Crossover, the crossover of two tournament winners, else a
// copy of one, and is then mutated: each parameter altered with
// probability MutationRate (at least one), or exactly one parameter when
// MutationRate is 0.
type Variation struct {
	Crossover    float64 `msgpack:"crossover" json:"crossover"`
	MutationRate float64 `msgpack:"mutation_rate" json:"mutation_rate"`
	// Novel: a child whose genome is one of the run's recently evaluated
	// designs' is made again from the pool, a few draws at most, so that
	// evaluations are not spent on designs already measured; false in
	// runs recorded before it was kept, whose children may repeat them.
	Novel bool `msgpack:"novel,omitempty" json:"novel,omitempty"`
	// CostTie: two tournament entrants whose fitness differ by at most
	// CostTie are compared by the slot-seconds their evaluation took,
	// the cheaper winning; 0 (and runs recorded before it was kept):
	// fitness alone.
	CostTie float64 `msgpack:"cost_tie,omitempty" json:"cost_tie,omitempty"`
}

// Run is the state of a run, stored in RunBucket under the run ID. Workers
// watch it to learn when the run is done.
type Run struct {
	V      int    `msgpack:"v" json:"v"`
	Run    string `msgpack:"run" json:"run"`
	Phase  Phase  `msgpack:"phase" json:"phase"`
	Budget int    `msgpack:"budget" json:"budget"`
	Space  string `msgpack:"space" json:"space"`
	// SpaceYAML is the search space's source, so that workers can check
	// every genome against it before evaluating.
	SpaceYAML []byte        `msgpack:"space_yaml,omitempty" json:"space_yaml,omitempty"`
	Seed      uint64        `msgpack:"seed" json:"seed"`
	AckWait   time.Duration `msgpack:"ack_wait_ns" json:"ack_wait_ns"`
	// Init, Pool and Replace are the fold's parameters, so that a replay
	// rebuilds the same pool; zero in runs recorded before they were kept.
	Init    int    `msgpack:"init,omitempty" json:"init,omitempty"`
	Pool    int    `msgpack:"pool,omitempty" json:"pool,omitempty"`
	Replace string `msgpack:"replace,omitempty" json:"replace,omitempty"`
	// Tournament, Margin and MaxDeliver complete the search settings, so
	// that a restarted controller continues with the run's own; zero in
	// runs recorded before they were kept. Margin -1 means derived from
	// the live slots.
	Tournament int `msgpack:"tournament,omitempty" json:"tournament,omitempty"`
	Margin     int `msgpack:"margin,omitempty" json:"margin,omitempty"`
	MaxDeliver int `msgpack:"max_deliver,omitempty" json:"max_deliver,omitempty"`
	// ErrorRetries is how many failed (error or timeout) attempts of a
	// design are retried before one counts; nil in runs recorded before
	// retries existed, whose results count as if it were 0.
	ErrorRetries *int `msgpack:"error_retries,omitempty" json:"error_retries,omitempty"`
	// QuarantineAfter is the number of failed attempts in a row after
	// which the controller quarantines a slot (0: never); nil in runs
	// recorded before quarantine existed.
	QuarantineAfter *int `msgpack:"quarantine_after,omitempty" json:"quarantine_after,omitempty"`
	// SeedsFrom is the earlier run whose best designs seeded this one, and
	// Seeds are their genomes: designs 1..len(Seeds).
	SeedsFrom string           `msgpack:"seeds_from,omitempty" json:"seeds_from,omitempty"`
	Seeds     []map[string]any `msgpack:"seeds,omitempty" json:"seeds,omitempty"`
	// EarlyStop is the run's early-stopping rule; nil: none (every
	// evaluation runs to its end), as in runs recorded before it existed.
	EarlyStop *EarlyStop `msgpack:"early_stop,omitempty" json:"early_stop,omitempty"`
	// Checkpoints are the run's checkpoint settings; nil: its evaluators
	// store none, as in runs recorded before checkpoints existed.
	Checkpoints *Checkpoints `msgpack:"checkpoints,omitempty" json:"checkpoints,omitempty"`
	// Objectives are what the search optimizes, each "name:max" or
	// "name:min" with name fitness or a key of the results' metrics, and
	// Constraints bound such values ("params<=60000"); nil Objectives:
	// fitness:max alone, as in runs recorded before they were kept.
	Objectives  []string `msgpack:"objectives,omitempty" json:"objectives,omitempty"`
	Constraints []string `msgpack:"constraints,omitempty" json:"constraints,omitempty"`
	// HVRef is the hypervolume's reference point, one value per objective
	// in the objective's own units; nil: derived from the initial designs.
	HVRef []float64 `msgpack:"hv_ref,omitempty" json:"hv_ref,omitempty"`
	// Variation is how the run makes a new design from the pool; nil:
	// one parameter of one parent altered, as in runs recorded before
	// variation operators were kept.
	Variation *Variation `msgpack:"variation,omitempty" json:"variation,omitempty"`
	// Changes are the settings changed on purpose by restarts, oldest first.
	Changes []Change `msgpack:"changes,omitempty" json:"changes,omitempty"`
	// FailFast is how many first attempts the fail-fast check judges: the
	// run fails when they all end in error or timeout. -1: off; 0 in runs
	// recorded before it was kept.
	FailFast int `msgpack:"fail_fast,omitempty" json:"fail_fast,omitempty"`
	// FailFastFrom is the results stream sequence after which attempts
	// count for that check: 0 for the run's first start; a controller that
	// continues a failed run moves it to the run's last stored result.
	FailFastFrom uint64 `msgpack:"fail_fast_from,omitempty" json:"fail_fast_from,omitempty"`
	// MadeUp is the part of Budget added by controllers that continued a
	// failed run, one design per design that had ended in error or timeout
	// before it failed, so that the budget given is spent on evaluations.
	MadeUp int `msgpack:"made_up,omitempty" json:"made_up,omitempty"`
	// Failure says why the run failed; set with phase failed only.
	Failure *Failure `msgpack:"failure,omitempty" json:"failure,omitempty"`
	// Evaluator is what evaluates the run's designs: workers given no
	// evaluator of their own run it. nil: not recorded (a run recorded
	// before evaluators were kept, or a controller given none), so every
	// worker must name its own.
	Evaluator *Evaluator `msgpack:"evaluator,omitempty" json:"evaluator,omitempty"`
	// Warnings are the run's standing warnings: a feature on but inert, a
	// worker whose evaluator differs from the run's, and the like. They
	// decide nothing; they are kept so that status shows them after the
	// run, and a restart keeps them.
	Warnings []string `msgpack:"warnings,omitempty" json:"warnings,omitempty"`
	// Target and Plateau end the run early, from its results alone: when
	// the best fitness reaches Target, or when Plateau counted results in
	// a row did not improve it. nil and 0: not set, as in runs recorded
	// before they existed.
	Target  *float64 `msgpack:"target,omitempty" json:"target,omitempty"`
	Plateau int      `msgpack:"plateau,omitempty" json:"plateau,omitempty"`
	// TimeBudget is the run's time limit, and Deadline its end: set once,
	// when the run is first started with a time budget, so that a restart
	// keeps the same end. Zero: none.
	TimeBudget time.Duration `msgpack:"time_budget_ns,omitempty" json:"time_budget_ns,omitempty"`
	Deadline   time.Time     `msgpack:"deadline,omitempty" json:"deadline,omitempty"`
	// StopReason is why the run ended (see StopReason), set by the
	// controller that ended it; "" while it runs.
	StopReason StopReason `msgpack:"stop_reason,omitempty" json:"stop_reason,omitempty"`
	Created    time.Time  `msgpack:"created" json:"created"`
	Updated    time.Time  `msgpack:"updated" json:"updated"`
}

// Failure is the fail-fast check's verdict on a run whose first attempts
// all failed.
type Failure struct {
	// Attempts is the number of attempts judged, all error or timeout.
	Attempts int `msgpack:"attempts" json:"attempts"`
	// StreamSeq is the results stream sequence of the attempt that decided.
	StreamSeq uint64 `msgpack:"stream_seq" json:"stream_seq"`
	// Error is the most common error text among them, clipped, and Count
	// how many of them had it.
	Error string `msgpack:"error" json:"error"`
	Count int    `msgpack:"count" json:"count"`
}

// Control is an order from a run's controller to one of its workers,
// published with plain NATS (not stored) on ControlSubject(run, worker).
// A control that is lost is sent again (see SCHEMA.md, Quarantine).
type Control struct {
	V      int    `msgpack:"v" json:"v"`
	Run    string `msgpack:"run" json:"run"`
	Worker string `msgpack:"worker" json:"worker"`
	// Quarantine are the worker's slots that are to take no more designs:
	// each finishes the design it has and stops. Every slot the
	// controller holds quarantined is listed, not only new ones.
	Quarantine []int `msgpack:"quarantine" json:"quarantine"`
	// Reason says why, for the worker's log.
	Reason string    `msgpack:"reason,omitempty" json:"reason,omitempty"`
	Sent   time.Time `msgpack:"sent" json:"sent"`
}

// StopReason is why a run ended.
type StopReason string

// The reasons a run ends.
const (
	StopBudget      StopReason = "budget"      // every design of the budget has a terminal result
	StopTarget      StopReason = "target"      // the best fitness reached the run's target
	StopPlateau     StopReason = "plateau"     // the best did not improve in the run's plateau of results
	StopTime        StopReason = "time"        // the run's time budget is spent
	StopFailed      StopReason = "failed"      // its first evaluations all failed
	StopInterrupted StopReason = "interrupted" // its controller was stopped before the end
)

// Change is one setting of a run changed by a restarted controller, or
// by `evoq run extend` on a live one (Via).
type Change struct {
	At      time.Time `msgpack:"at" json:"at"`
	Setting string    `msgpack:"setting" json:"setting"`
	From    string    `msgpack:"from" json:"from"`
	To      string    `msgpack:"to" json:"to"`
	// Via says what changed it when not a restart: ViaExtend.
	Via string `msgpack:"via,omitempty" json:"via,omitempty"`
}

// ViaExtend marks a change made by `evoq run extend` (see Extend).
const ViaExtend = "run extend"

// Extend asks a run's live controller to raise its limits, with a plain
// NATS request on ExtendSubject(run); the controller answers with an
// ExtendReply once the raised limits are in the run's record, or with the
// reason it refused. Zero fields are left as they are.
type Extend struct {
	V   int    `msgpack:"v" json:"v"`
	Run string `msgpack:"run" json:"run"`
	// Budget is the run's new budget, in designs: more than its budget
	// now (made-up designs of a failed start stay on top of it).
	Budget int `msgpack:"budget,omitempty" json:"budget,omitempty"`
	// TimeBudget is the run's new time budget, counted from its first
	// start as the one it replaces: longer than that one.
	TimeBudget time.Duration `msgpack:"time_budget_ns,omitempty" json:"time_budget_ns,omitempty"`
	Sent       time.Time     `msgpack:"sent" json:"sent"`
}

// ExtendReply is a controller's answer to an Extend: the run's limits
// after it (raised or not), and Refused when it raised nothing.
type ExtendReply struct {
	V          int           `msgpack:"v" json:"v"`
	Run        string        `msgpack:"run" json:"run"`
	Budget     int           `msgpack:"budget" json:"budget"`
	TimeBudget time.Duration `msgpack:"time_budget_ns,omitempty" json:"time_budget_ns,omitempty"`
	Deadline   time.Time     `msgpack:"deadline,omitempty" json:"deadline,omitempty"`
	// Refused says why nothing was raised, naming the flag; "" when the
	// limits asked for are recorded.
	Refused string    `msgpack:"refused,omitempty" json:"refused,omitempty"`
	At      time.Time `msgpack:"at" json:"at"`
}

// Lease says which controller runs a run; it is kept in LeaseBucket under
// the run ID and renewed while the controller lives, so a second
// controller for the run can be refused and a dead one's lease expires.
type Lease struct {
	V    int    `msgpack:"v" json:"v"`
	Run  string `msgpack:"run" json:"run"`
	Host string `msgpack:"host" json:"host"`
	PID  int    `msgpack:"pid" json:"pid"`
	// Holder tells apart two controllers of one host and pid (in
	// different containers): a random token per controller.
	Holder  string    `msgpack:"holder" json:"holder"`
	Since   time.Time `msgpack:"since" json:"since"`
	Renewed time.Time `msgpack:"renewed" json:"renewed"`
	// Figures are the controller's figures of the run's results when it
	// last renewed the lease; absent before its first results are
	// folded, and for a run of more workers than a lease lists.
	Figures *Figures `msgpack:"figures,omitempty" json:"figures,omitempty"`
}

// Figures are a controller's figures of its run's stored results, by the
// counting rule: what `evoq status` shows, without reading the results.
type Figures struct {
	At         time.Time                `msgpack:"at" json:"at"`
	Done       int                      `msgpack:"done" json:"done"`
	ByStatus   map[Status]int           `msgpack:"by_status" json:"by_status"`
	Best       *float64                 `msgpack:"best,omitempty" json:"best,omitempty"`
	BestID     string                   `msgpack:"best_id,omitempty" json:"best_id,omitempty"`
	Duplicates int                      `msgpack:"duplicates" json:"duplicates"`
	Foreign    int                      `msgpack:"foreign" json:"foreign"`
	Malformed  int                      `msgpack:"malformed" json:"malformed"`
	Retried    int                      `msgpack:"retried" json:"retried"`
	Workers    map[string]WorkerFigures `msgpack:"workers" json:"workers"`
	// Resumed is the counted designs that resumed from saved progress,
	// ResumedS the slot-seconds they did not repeat; Scratch and ScratchS
	// those retrained from scratch and about what that cost
	// (runstate.Figures). A lease written before they existed has none.
	Resumed  int     `msgpack:"resumed,omitempty" json:"resumed,omitempty"`
	ResumedS float64 `msgpack:"resumed_s,omitempty" json:"resumed_s,omitempty"`
	Scratch  int     `msgpack:"scratch,omitempty" json:"scratch,omitempty"`
	ScratchS float64 `msgpack:"scratch_s,omitempty" json:"scratch_s,omitempty"`
	// Quarantined are the slots the results quarantine.
	Quarantined []QuarantinedSlot `msgpack:"quarantined,omitempty" json:"quarantined,omitempty"`
}

// WorkerFigures are one worker's attempts among a run's results.
type WorkerFigures struct {
	Host        string    `msgpack:"host" json:"host"`
	Evaluations int       `msgpack:"evaluations" json:"evaluations"`
	Failures    int       `msgpack:"failures" json:"failures"`
	LastResult  time.Time `msgpack:"last_result" json:"last_result"`
}

// QuarantinedSlot is a slot the results quarantine, with what they say
// of it.
type QuarantinedSlot struct {
	Worker      string    `msgpack:"worker" json:"worker"`
	Slot        int       `msgpack:"slot" json:"slot"`
	Host        string    `msgpack:"host" json:"host"`
	GPU         string    `msgpack:"gpu,omitempty" json:"gpu,omitempty"`
	Failures    int       `msgpack:"failures" json:"failures"`
	LastError   string    `msgpack:"last_error,omitempty" json:"last_error,omitempty"`
	LastFailure time.Time `msgpack:"last_failure" json:"last_failure"`
}
