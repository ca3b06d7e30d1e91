package schema

import (
	"fmt"
	"strconv"
	"strings"
)

// Names of the streams, subjects and buckets. A run's messages live under
// subjects that end in the run ID, so several runs can share one broker.
const (
	DesignStream   = "EVOQ_DESIGNS"  // work-queue retention: a design is removed on its ack
	ResultStream   = "EVOQ_RESULTS"  // limits retention: the durable history of every run
	DesignPrefix   = "evoq.design."  // + run ID
	ResultPrefix   = "evoq.result."  // + run ID
	PresenceBucket = "evoq_presence" // key: run.worker
	RunBucket      = "evoq_runs"     // key: run
	LeaseBucket    = "evoq_leases"   // key: run: the controller that runs it
	ConsumerPrefix = "evoq-workers-" // + run ID: the durable pull consumer of a run
	AlertPrefix    = "evoq.alert."   // + run ID: plain NATS alerts from workers, not stored
	ControlPrefix  = "evoq.control." // + run ID + "." + worker ID: plain NATS orders to a worker, not stored
	ExtendPrefix   = "evoq.extend."  // + run ID: plain NATS requests to raise a live run's limits (Extend)
)

// MaxTokenLen bounds run and worker IDs.
const MaxTokenLen = 64

// DesignSubject is the subject designs of run are published on.
func DesignSubject(run string) string { return DesignPrefix + run }

// ResultSubject is the subject results of run are published on.
func ResultSubject(run string) string { return ResultPrefix + run }

// AlertSubject is where workers of run raise alerts the controller must
// act on, such as a full store. Alerts are plain NATS messages: they need
// no room in the store.
func AlertSubject(run string) string { return AlertPrefix + run }

// ControlSubject is where the controller of run sends worker its
// orders (Control).
func ControlSubject(run, worker string) string { return ControlPrefix + run + "." + worker }

// AlertStoreFull is the body of the alert a worker sends when the broker
// refuses its result for lack of room.
const AlertStoreFull = "store_full"

// ExtendSubject is where `evoq run extend` asks run's controller to raise
// its limits.
func ExtendSubject(run string) string { return ExtendPrefix + run }

// ConsumerName is the durable pull consumer that the workers of run share.
func ConsumerName(run string) string { return ConsumerPrefix + run }

// PresenceKey is the presence bucket key of worker in run.
func PresenceKey(run, worker string) string { return run + "." + worker }

// DesignID is the deterministic ID of the seq-th design of run.
func DesignID(run string, seq uint64) string { return run + "-" + strconv.FormatUint(seq, 10) }

// ResultMsgID is the Nats-Msg-Id of a result, so that a retried publish of
// the same evaluation is stored once.
func ResultMsgID(designID string, attempt int) string {
	return designID + "/" + strconv.Itoa(attempt)
}

// DesignMsgID is the Nats-Msg-Id of design d: its ID, and for a retry
// <id>/retry<n>, so that each retry is stored once however often it is
// published, and not taken for the first publication.
func DesignMsgID(d *Design) string {
	if d.Retry == 0 {
		return d.ID
	}
	return d.ID + "/retry" + strconv.Itoa(d.Retry)
}

// AttemptMsgID is the Nats-Msg-Id of the result of delivery attempt of
// a design published for its retry (0: its first publication): for a
// first publication ResultMsgID, for a retry <design_id>/retry<n>/<attempt>,
// since a retried design's delivery count starts again at 1. The
// controller's lost result takes attempt 0.
func AttemptMsgID(designID string, retry, attempt int) string {
	if retry == 0 {
		return ResultMsgID(designID, attempt)
	}
	return designID + "/retry" + strconv.Itoa(retry) + "/" + strconv.Itoa(attempt)
}

// MsgID is the Nats-Msg-Id a worker stores r with.
func (r *Result) MsgID() string { return AttemptMsgID(r.DesignID, r.Design.Retry, r.Attempt) }

// ValidToken checks that s can be used as a run or worker ID: 1 to
// MaxTokenLen characters from [A-Za-z0-9_-], so it is a single NATS subject
// token and a KV key part.
func ValidToken(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty", ErrInvalid)
	}
	if len(s) > MaxTokenLen {
		return fmt.Errorf("%w: %q longer than %d characters", ErrInvalid, s, MaxTokenLen)
	}
	if i := strings.IndexFunc(s, func(r rune) bool { return !isTokenRune(r) }); i >= 0 {
		return fmt.Errorf("%w: %q has %q; use letters, digits, '_' and '-'", ErrInvalid, s, s[i])
	}
	return nil
}

func isTokenRune(r rune) bool {
	return r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
}
