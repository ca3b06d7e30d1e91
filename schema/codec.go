package schema

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// ErrMalformed means the bytes are not a msgpack message of the expected
// shape (garbage, truncated, oversized).
var ErrMalformed = errors.New("malformed message")

// ErrVersion means the message carries a schema version this build does not
// speak.
var ErrVersion = errors.New("unsupported schema version")

// ErrInvalid means the message decoded but a field is missing or out of
// range. The error text names the field.
var ErrInvalid = errors.New("invalid message")

// Marshal encodes a message. It refuses bodies over MaxBodySize, which
// leaves the headers room within the broker's limit.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	if buf.Len() > MaxBodySize {
		return nil, fmt.Errorf("%w: %T is %d bytes, over the %d-byte limit", ErrMalformed, v, buf.Len(), MaxBodySize)
	}
	return buf.Bytes(), nil
}

// EncodeDesign stamps the schema version on d, validates and encodes it.
func EncodeDesign(d *Design) ([]byte, error) {
	d.V = Version
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return Marshal(d)
}

// EncodeResult stamps the schema version on r, validates and encodes it.
func EncodeResult(r *Result) ([]byte, error) {
	r.V, r.Design.V = Version, Version
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return Marshal(r)
}

// EncodePresence stamps the schema version on p, validates and encodes it.
func EncodePresence(p *Presence) ([]byte, error) {
	p.V = Version
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return Marshal(p)
}

// EncodeRun stamps the schema version on r, validates and encodes it.
func EncodeRun(r *Run) ([]byte, error) {
	r.V = Version
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return Marshal(r)
}

// DecodeDesign decodes and validates a design. When the bytes decode but a
// field is invalid, it returns the partial design with the error, so that
// the caller can name the design it rejects.
func DecodeDesign(b []byte) (*Design, error) {
	d := new(Design)
	if err := unmarshal(b, d, "design"); err != nil {
		return nil, err
	}
	Normalize(d.Genome)
	return d, d.Validate()
}

// DecodeReceived is DecodeDesign for a worker that echoes the design in
// its result: a valid design of this schema version keeps the bytes it
// was decoded from, and a result encodes them as they came. The design
// must not be changed afterwards: its result would echo the bytes
// received, not the change.
func DecodeReceived(b []byte) (*Design, error) {
	d, err := DecodeDesign(b)
	if err == nil && d.V == Version {
		d.wire = b
	}
	return d, err
}

// designFields is Design without its encoder method, to encode its
// fields without recursion.
type designFields Design

// EncodeMsgpack writes the bytes d was received in, if it kept them
// (DecodeReceived), else its fields.
func (d Design) EncodeMsgpack(enc *msgpack.Encoder) error {
	if d.wire != nil {
		return msgpack.RawMessage(d.wire).EncodeMsgpack(enc)
	}
	return enc.Encode((*designFields)(&d))
}

// DecodeResult decodes and validates a result; see DecodeDesign for the
// partial value returned with a validation error.
func DecodeResult(b []byte) (*Result, error) {
	r := new(Result)
	if err := unmarshal(b, r, "result"); err != nil {
		return nil, err
	}
	Normalize(r.Design.Genome)
	Normalize(r.Metrics)
	return r, r.Validate()
}

// DecodePresence decodes and validates a presence heartbeat.
func DecodePresence(b []byte) (*Presence, error) {
	p := new(Presence)
	if err := unmarshal(b, p, "presence"); err != nil {
		return nil, err
	}
	return p, p.Validate()
}

// DecodeRun decodes and validates a run state.
func DecodeRun(b []byte) (*Run, error) {
	r := new(Run)
	if err := unmarshal(b, r, "run"); err != nil {
		return nil, err
	}
	for _, g := range r.Seeds {
		Normalize(g)
	}
	return r, r.Validate()
}

// EncodeControl stamps the schema version on c, validates and encodes it.
func EncodeControl(c *Control) ([]byte, error) {
	c.V = Version
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return Marshal(c)
}

// DecodeControl decodes and validates a controller's order to a worker.
func DecodeControl(b []byte) (*Control, error) {
	c := new(Control)
	if err := unmarshal(b, c, "control"); err != nil {
		return nil, err
	}
	return c, c.Validate()
}

// Validate checks every field of c.
func (c *Control) Validate() error {
	if err := ValidToken(c.Run); err != nil {
		return invalid("control", "run", "%v", err)
	}
	if err := ValidToken(c.Worker); err != nil {
		return invalid("control", "worker", "%v", err)
	}
	if len(c.Quarantine) == 0 {
		return invalid("control", "quarantine", "no slot")
	}
	for _, s := range c.Quarantine {
		if s < 0 {
			return invalid("control", "quarantine", "slot %d < 0", s)
		}
	}
	return nil
}

// EncodeExtend stamps the schema version on e, validates and encodes it.
func EncodeExtend(e *Extend) ([]byte, error) {
	e.V = Version
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return Marshal(e)
}

// DecodeExtend decodes and validates a request to raise a run's limits.
func DecodeExtend(b []byte) (*Extend, error) {
	e := new(Extend)
	if err := unmarshal(b, e, "extend"); err != nil {
		return nil, err
	}
	return e, e.Validate()
}

// Validate checks every field of e: a run, and at least one limit, none
// negative.
func (e *Extend) Validate() error {
	if err := ValidToken(e.Run); err != nil {
		return invalid("extend", "run", "%v", err)
	}
	if e.Budget < 0 {
		return invalid("extend", "budget", "%d < 0", e.Budget)
	}
	if e.TimeBudget < 0 {
		return invalid("extend", "time_budget_ns", "%d < 0", e.TimeBudget)
	}
	if e.Budget == 0 && e.TimeBudget == 0 {
		return invalid("extend", "budget", "neither a budget nor a time budget")
	}
	return nil
}

// EncodeExtendReply stamps the schema version on r and encodes it.
func EncodeExtendReply(r *ExtendReply) ([]byte, error) {
	r.V = Version
	return Marshal(r)
}

// DecodeExtendReply decodes a controller's answer to an Extend.
func DecodeExtendReply(b []byte) (*ExtendReply, error) {
	r := new(ExtendReply)
	if err := unmarshal(b, r, "extend reply"); err != nil {
		return nil, err
	}
	if err := ValidToken(r.Run); err != nil {
		return nil, invalid("extend reply", "run", "%v", err)
	}
	return r, nil
}

// EncodeLease validates and encodes a controller's lease.
func EncodeLease(l *Lease) ([]byte, error) {
	l.V = Version
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return Marshal(l)
}

// DecodeLease decodes and validates a controller's lease.
func DecodeLease(b []byte) (*Lease, error) {
	l := new(Lease)
	if err := unmarshal(b, l, "lease"); err != nil {
		return nil, err
	}
	return l, l.Validate()
}

// Validate checks a lease's fields.
func (l *Lease) Validate() error {
	if err := ValidToken(l.Run); err != nil {
		return invalid("lease", "run", "%v", err)
	}
	if l.Holder == "" {
		return invalid("lease", "holder", "empty")
	}
	return nil
}

func unmarshal(b []byte, v any, kind string) error {
	if len(b) > MaxMessageSize {
		return fmt.Errorf("%w: %s is %d bytes, over the %d-byte limit", ErrMalformed, kind, len(b), MaxMessageSize)
	}
	if len(b) == 0 {
		return fmt.Errorf("%w: %s is empty", ErrMalformed, kind)
	}
	if err := checkVersion(b, kind); err != nil {
		return err
	}
	return decode(b, v, kind)
}

// decode runs the msgpack decoder; a panic inside it (msgpack v5 panics on
// some shapes, such as nil for a time) is a malformed message too.
func decode(b []byte, v any, kind string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: %v", ErrMalformed, kind, p)
		}
	}()
	dec := msgpack.GetDecoder() // pooled: its scratch buffer outlives one message
	defer msgpack.PutDecoder(dec)
	dec.Reset(bytes.NewReader(b))
	dec.UseLooseInterfaceDecoding(true)
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrMalformed, kind, err)
	}
	return nil
}

// Normalize returns v with every integer that fits an int64 as int64:
// msgpack encoders write non-negative integers in unsigned form, and a
// genome's int parameters should read the same whoever wrote them.
func Normalize(v any) any {
	switch x := v.(type) {
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = Normalize(e)
		}
	case []any:
		for i, e := range x {
			x[i] = Normalize(e)
		}
	}
	return v
}

// checkVersion reads only the "v" field, so that a message of another
// version is reported as such even if its other fields have changed shape.
func checkVersion(b []byte, kind string) error {
	if v, ok := leadingVersion(b); ok {
		if v != Version {
			return fmt.Errorf("%w: %s has version %d, this build speaks %d", ErrVersion, kind, v, Version)
		}
		return nil
	}
	var head struct {
		V *int `msgpack:"v"`
	}
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&head); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrMalformed, kind, err)
	}
	if head.V == nil {
		return fmt.Errorf("%w: %s: no schema version field \"v\"", ErrMalformed, kind)
	}
	if *head.V != Version {
		return fmt.Errorf("%w: %s has version %d, this build speaks %d", ErrVersion, kind, *head.V, Version)
	}
	return nil
}

// leadingVersion reads the version without decoding the message when it
// comes first, as evoq and the documented encoders write it: a map whose
// first key is "v" with a small non-negative integer. ok is false for any
// other shape, which the full decode then judges.
func leadingVersion(b []byte) (v int, ok bool) {
	i := 0
	switch {
	case len(b) > 0 && b[0] >= 0x80 && b[0] <= 0x8f: // fixmap
		i = 1
	case len(b) > 2 && b[0] == 0xde: // map 16
		i = 3
	case len(b) > 4 && b[0] == 0xdf: // map 32
		i = 5
	default:
		return 0, false
	}
	if len(b) < i+3 || b[i] != 0xa1 || b[i+1] != 'v' { // fixstr "v"
		return 0, false
	}
	switch c := b[i+2]; {
	case c <= 0x7f: // positive fixint
		return int(c), true
	case c == 0xcc && len(b) > i+3: // uint 8
		return int(b[i+3]), true
	}
	return 0, false
}

func invalid(kind, field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s: %s", ErrInvalid, kind, field, fmt.Sprintf(format, args...))
}

// Validate checks every field of d.
func (d *Design) Validate() error {
	if err := d.ValidateIdentity(); err != nil {
		return err
	}
	if d.Genome == nil {
		return invalid("design", "genome", "missing")
	}
	switch d.Origin {
	case OriginRandom, OriginSeed:
	case OriginMutant:
		if len(d.Parents) == 0 {
			return invalid("design", "parents", "a mutant needs a parent")
		}
	default:
		return invalid("design", "origin", "%q is not random, mutant or seed", d.Origin)
	}
	if d.Created.IsZero() {
		return invalid("design", "created", "missing")
	}
	if d.Inherit != nil {
		if err := d.Inherit.Validate(); err != nil {
			return err
		}
		if len(d.Parents) == 0 || d.Inherit.Design != d.Parents[0] {
			return invalid("design", "inherit", "checkpoint of %s, not of the design's parent", d.Inherit.Design)
		}
	}
	return d.validateRetry()
}

// MaxAvoid bounds each of a design's avoid lists.
const MaxAvoid = 256

func (d *Design) validateRetry() error {
	if d.Retry < 0 {
		return invalid("design", "retry", "%d < 0", d.Retry)
	}
	if d.Retry == 0 && len(d.AvoidHosts)+len(d.AvoidWorkers) > 0 {
		return invalid("design", "avoid", "a first attempt has nothing to avoid")
	}
	if len(d.AvoidHosts) > MaxAvoid || len(d.AvoidWorkers) > MaxAvoid {
		return invalid("design", "avoid", "more than %d entries", MaxAvoid)
	}
	for _, h := range d.AvoidHosts {
		if h == "" {
			return invalid("design", "avoid_hosts", "empty host name")
		}
	}
	for _, w := range d.AvoidWorkers {
		if err := ValidToken(w); err != nil {
			return invalid("design", "avoid_workers", "%v", err)
		}
	}
	return nil
}

// ValidateIdentity checks the fields that say which design d is: run, seq
// and id. A design with a valid identity but other bad fields can still be
// given a terminal error result.
func (d *Design) ValidateIdentity() error {
	if err := ValidToken(d.Run); err != nil {
		return invalid("design", "run", "%v", err)
	}
	if d.Seq == 0 {
		return invalid("design", "seq", "must be >= 1")
	}
	if want := DesignID(d.Run, d.Seq); d.ID != want {
		return invalid("design", "id", "%q, want %q for run %q seq %d", d.ID, want, d.Run, d.Seq)
	}
	return nil
}

// Validate checks every field of r and its design; an error result needs
// only its design's identity, since it may record a design that was
// rejected for its other fields.
func (r *Result) Validate() error {
	if r.Design.V != Version {
		return invalid("result", "design.v", "version %d, want %d", r.Design.V, Version)
	}
	check := r.Design.Validate
	if r.Status == StatusError {
		check = r.Design.ValidateIdentity
	}
	if err := check(); err != nil {
		return fmt.Errorf("result %s: %w", r.DesignID, err)
	}
	if r.Run != r.Design.Run || r.DesignID != r.Design.ID {
		return invalid("result", "design_id", "%s/%s does not match its design %s/%s", r.Run, r.DesignID, r.Design.Run, r.Design.ID)
	}
	if !r.Status.Valid() {
		return invalid("result", "status", "%q is not a terminal status", r.Status)
	}
	if math.IsNaN(r.Fitness) || math.IsInf(r.Fitness, 0) {
		return invalid("result", "fitness", "%v is not finite", r.Fitness)
	}
	if r.Checkpoint != nil {
		if err := r.Checkpoint.Validate(); err != nil {
			return err
		}
		if r.Checkpoint.Design != r.DesignID {
			return invalid("result", "checkpoint", "of design %s, not %s", r.Checkpoint.Design, r.DesignID)
		}
	}
	if err := r.validateProgress(); err != nil {
		return err
	}
	return r.validateWhere()
}

// validateProgress checks what the result says of saved progress.
func (r *Result) validateProgress() error {
	switch {
	case r.ResumedFrom < 0:
		return invalid("result", "resumed_from", "%d < 0", r.ResumedFrom)
	case r.ProgressStep < 0:
		return invalid("result", "progress_step", "%d < 0", r.ProgressStep)
	case r.ResumedSeconds < 0 || math.IsNaN(r.ResumedSeconds) || math.IsInf(r.ResumedSeconds, 0):
		return invalid("result", "resumed_seconds", "%v is not a finite number >= 0", r.ResumedSeconds)
	}
	return nil
}

func (r *Result) validateWhere() error {
	if r.Status == StatusLost {
		return nil // nobody finished it: no worker, slot or times
	}
	if err := ValidToken(r.Worker); err != nil {
		return invalid("result", "worker", "%v", err)
	}
	if r.Slot < 0 {
		return invalid("result", "slot", "%d < 0", r.Slot)
	}
	if r.Attempt < 1 {
		return invalid("result", "attempt", "%d < 1", r.Attempt)
	}
	if r.Start.IsZero() || r.Stop.Before(r.Start) {
		return invalid("result", "start/stop", "stop %s before start %s", r.Stop.Format(time.RFC3339Nano), r.Start.Format(time.RFC3339Nano))
	}
	return nil
}

// Validate checks every field of p.
func (p *Presence) Validate() error {
	if err := ValidToken(p.Run); err != nil {
		return invalid("presence", "run", "%v", err)
	}
	if err := ValidToken(p.Worker); err != nil {
		return invalid("presence", "worker", "%v", err)
	}
	if p.Slots < 1 {
		return invalid("presence", "slots", "%d < 1", p.Slots)
	}
	if p.Busy < 0 || p.Busy > p.Slots {
		return invalid("presence", "busy", "%d outside 0..%d", p.Busy, p.Slots)
	}
	if p.Heartbeat.IsZero() {
		return invalid("presence", "heartbeat", "missing")
	}
	if p.Interval <= 0 {
		return invalid("presence", "interval_ns", "%v <= 0", p.Interval)
	}
	for _, s := range p.Quarantined {
		if s < 0 || s >= p.Slots {
			return invalid("presence", "quarantined", "slot %d outside 0..%d", s, p.Slots-1)
		}
	}
	return nil
}

// Validate checks every field of r.
func (r *Run) Validate() error {
	if err := ValidToken(r.Run); err != nil {
		return invalid("run", "run", "%v", err)
	}
	switch r.Phase {
	case PhaseStarting, PhaseRunning, PhaseDraining, PhaseDone, PhaseFailed:
	default:
		return invalid("run", "phase", "%q is not a run phase", r.Phase)
	}
	if r.Budget < 1 {
		return invalid("run", "budget", "%d < 1", r.Budget)
	}
	if r.FailFast < -1 {
		return invalid("run", "fail_fast", "%d < -1", r.FailFast)
	}
	if r.MadeUp < 0 || r.MadeUp >= r.Budget {
		return invalid("run", "made_up", "%d outside 0..budget-1 (%d)", r.MadeUp, r.Budget-1)
	}
	if r.Failure != nil && r.Failure.Attempts < 1 {
		return invalid("run", "failure", "attempts %d < 1", r.Failure.Attempts)
	}
	if r.ErrorRetries != nil && *r.ErrorRetries < 0 {
		return invalid("run", "error_retries", "%d < 0", *r.ErrorRetries)
	}
	if r.QuarantineAfter != nil && *r.QuarantineAfter < 0 {
		return invalid("run", "quarantine_after", "%d < 0", *r.QuarantineAfter)
	}
	if r.Checkpoints != nil {
		if err := r.Checkpoints.Validate(); err != nil {
			return err
		}
	}
	if r.Evaluator != nil {
		if err := r.Evaluator.Validate(); err != nil {
			return err
		}
	}
	if err := r.validateSearch(); err != nil {
		return err
	}
	if r.EarlyStop != nil {
		return r.EarlyStop.Validate()
	}
	return nil
}

// validateSearch checks the objectives' form (the controller and the
// workers parse them), the reference point and the operators.
func (r *Run) validateSearch() error {
	for _, o := range r.Objectives {
		if !strings.HasSuffix(o, ":max") && !strings.HasSuffix(o, ":min") || len(o) < 5 {
			return invalid("run", "objectives", "%q is not name:max or name:min", o)
		}
	}
	if len(r.HVRef) > 0 && len(r.HVRef) != max(len(r.Objectives), 1) {
		return invalid("run", "hv_ref", "%d values for %d objectives", len(r.HVRef), max(len(r.Objectives), 1))
	}
	for _, v := range r.HVRef {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return invalid("run", "hv_ref", "%v is not a finite number", v)
		}
	}
	if v := r.Variation; v != nil {
		if !(v.Crossover >= 0 && v.Crossover <= 1) {
			return invalid("run", "variation", "crossover %v outside 0..1", v.Crossover)
		}
		if !(v.MutationRate >= 0 && v.MutationRate <= 1) {
			return invalid("run", "variation", "mutation_rate %v outside 0..1", v.MutationRate)
		}
	}
	return nil
}

// FieldError says which field of a configuration is invalid and why. It
// names the field as its Go type does (Pool, AckWait), so that a program
// can name its own option for it: the evoq command line names its flag.
// The configurations of controller and worker return it.
type FieldError struct {
	// Err is the sentinel the error matches, such as controller.ErrConfig.
	Err error
	// Field is the field's name.
	Field string
	// Value is the invalid value; nil when there is none to show.
	Value any
	// Reason says what is wrong and what to do. It names other fields of
	// the configuration only as listed in Related.
	Reason  string
	Related []string
}

func (e *FieldError) Error() string {
	if e.Value == nil {
		return e.Field + ": " + e.Reason
	}
	return fmt.Sprintf("%s %s: %s", e.Field, FieldValue(e.Value), e.Reason)
}

// Unwrap makes a FieldError match its sentinel.
func (e *FieldError) Unwrap() error { return e.Err }

// Reason is err's text without the ErrInvalid prefix, for the reason of a
// FieldError about a field that is checked as a message field is.
func Reason(err error) string {
	return strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ")
}

// FieldValue formats a field's value as it was given: text quoted,
// everything else as Go prints it.
func FieldValue(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}
