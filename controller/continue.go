package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/space"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// A run that continues (a restarted controller, or --resume) is the same
// run: every search setting comes from its record in the run bucket, not
// from defaults. A setting given explicitly (non-zero in Config) must
// equal the recorded one, except the few a user may change on purpose
// mid-run, which are applied and recorded as changes:
//
//   - Budget may grow: the run goes on to the larger budget. It may not
//     shrink, since designs beyond the smaller one may already be
//     published; stop the run instead.
//   - Margin, AckWait and MaxDeliver steer how designs reach slots and
//     when a silent one is given up, not what the search does; the fold
//     never reads them, and what they decide (a lost design) is itself
//     recorded in the results stream.
//   - FailFast only decides whether the run stops for want of a working
//     evaluator; a change is recorded, so that replay judges the run as
//     the controller that runs it does.
//   - QuarantineAfter decides which slots are fed, not which results
//     count: no counted result, pool member or design depends on it. A
//     user who finds healthy slots quarantined (designs that fail often
//     for reasons of their own) raises it, or turns it off, and
//     continues. A restart applies the new value to the whole stream, as
//     `evoq status` and `report` do, so a slot quarantined under the old
//     value may be free under the new one; what the old value stopped
//     (its worker's slots) is then in the worker's own hands.
//
//   - HVRef only says where the hypervolume is measured from.
//   - Target and Plateau say when the run ends, not what a result is or
//     which designs the pool keeps. A user who finds a run ended too soon
//     (a plateau of 50 on a noisy fitness) continues it with a larger
//     one. The new value is recorded and judges the whole stream, for the
//     controller and `evoq replay` alike.
//   - TimeBudget: a restart that leaves it out, or gives the recorded
//     one while its deadline is ahead, keeps the recorded deadline (a
//     controller restarted within its allocation); so does one that gives
//     less than a time budget `evoq run extend` raised (a requeued job's
//     own flags), as a smaller Budget keeps a budget it raised. Any other given value
//     starts a new time budget from now, as a job continuing the run in a
//     new allocation wants; the new deadline is recorded as a change.
//
// Everything the fold or the design generator reads (Space, Seed, Init,
// Pool, Replace, Tournament, Seeds, ErrorRetries, EarlyStop, Objectives,
// Crossover, MutationRate) is fixed for the run's life: changing it would make the rebuilt pool differ from the pool
// before the restart.

// SettingError says a setting given for a run that continues cannot be
// used: it differs from the run's record and may not change mid-run.
type SettingError struct {
	// Field is the Config field.
	Field string
	// Recorded and Given are the two values, as text.
	Recorded, Given string
	// Why says why it may not change, and what to do instead.
	Why string
}

func (e *SettingError) Error() string {
	return fmt.Sprintf("%s %s: the run records %s; %s", e.Field, e.Given, e.Recorded, e.Why)
}

// Unwrap makes a SettingError an ErrConfig.
func (e *SettingError) Unwrap() error { return ErrConfig }

// fixedWhy is why a setting the fold or the design generator reads may
// not change.
const fixedWhy = "it shapes the search, so it cannot change mid-run (leave it out to continue with the recorded value, or start a new run seeded from this one)"

// Continuation says how a run continues from its record.
type Continuation struct {
	// Taken are the settings taken from the record, as name=value.
	Taken []string
	// Changes are the settings changed on purpose by this start.
	Changes []schema.Change
	// Recorded are settings the record did not hold yet (a run recorded
	// by an older controller); they are recorded from now on.
	Recorded []string
}

// Continue returns cfg as a continuation of the recorded run rec: every
// setting cfg leaves unset (zero) is taken from rec, and one set to
// another value is refused with a SettingError or, for the settings a
// user may change mid-run, applied and listed as a change. A nil rec is a
// new run: cfg is returned as is.
func Continue(rec *schema.Run, cfg Config, now time.Time) (Config, *Continuation, error) {
	if rec == nil {
		return cfg, nil, nil
	}
	k := &Continuation{}
	if err := continueSpace(rec, &cfg, k); err != nil {
		return cfg, nil, err
	}
	// The seed has always been recorded, and 0 is a seed: unlike the
	// settings below, a zero recorded seed is not "not recorded".
	switch {
	case cfg.Seed == nil:
		cfg.Seed = new(rec.Seed)
		k.Taken = append(k.Taken, fmt.Sprintf("seed=%d", rec.Seed))
	case *cfg.Seed != rec.Seed:
		return cfg, nil, &SettingError{Field: "Seed", Recorded: fmt.Sprint(rec.Seed), Given: fmt.Sprint(*cfg.Seed), Why: fixedWhy}
	}
	// A run recorded before its tournament was kept chose parents from
	// tournaments of TournamentLegacy, the default then, and goes on so
	// unless one is given: a later default never reaches it. That default
	// was at most the pool, as today's is.
	if rec.Tournament == 0 && cfg.Tournament == 0 {
		cfg.Tournament = TournamentLegacy
		if rec.Pool > 0 {
			cfg.Tournament = min(TournamentLegacy, rec.Pool)
		}
	}
	fixed := []struct {
		field, name string
		rec, given  any
		set         func()
		recorded    bool
	}{
		{"Init", "init", rec.Init, cfg.Init, func() { cfg.Init = rec.Init }, cfg.Init != 0},
		{"Pool", "pool", rec.Pool, cfg.Pool, func() { cfg.Pool = rec.Pool }, cfg.Pool != 0},
		{"Replace", "replace", runstate.Replace(rec.Replace), cfg.Replace, func() { cfg.Replace = runstate.Replace(rec.Replace) }, cfg.Replace != ""},
		{"Tournament", "tournament", rec.Tournament, cfg.Tournament, func() { cfg.Tournament = rec.Tournament }, cfg.Tournament != 0},
	}
	for _, f := range fixed {
		if err := k.fixed(f.field, f.name, f.rec, f.given, f.recorded, f.set); err != nil {
			return cfg, nil, err
		}
	}
	if err := continueSeeds(rec, &cfg, k); err != nil {
		return cfg, nil, err
	}
	if err := continueRetries(rec, &cfg, k); err != nil {
		return cfg, nil, err
	}
	if err := continueEarlyStop(rec, &cfg, k); err != nil {
		return cfg, nil, err
	}
	if err := continueCheckpoints(rec, &cfg, k, now); err != nil {
		return cfg, nil, err
	}
	if err := continueSearch(rec, &cfg, k, now); err != nil {
		return cfg, nil, err
	}
	if err := continueEvaluator(rec, &cfg, k, now); err != nil {
		return cfg, nil, err
	}
	continueQuarantine(rec, &cfg, k, now)
	continueStopRule(rec, &cfg, k, now)
	if err := continueBudget(rec, &cfg, k, now); err != nil {
		return cfg, nil, err
	}
	k.changeable("Margin", "margin", rec.Margin, &cfg.Margin, func(v int) string { return strings.Fields(runstate.MarginText(v))[0] }, now)
	k.changeable("MaxDeliver", "max_deliver", rec.MaxDeliver, &cfg.MaxDeliver, func(v int) string { return fmt.Sprint(v) }, now)
	k.changeable("FailFast", "fail_fast", rec.FailFast, &cfg.FailFast, runstate.FailFastText, now)
	recAck, ack := int(rec.AckWait), int(cfg.AckWait)
	k.changeable("AckWait", "ack_wait", recAck, &ack, func(v int) string { return time.Duration(v).String() }, now)
	cfg.AckWait = time.Duration(ack)
	return cfg, k, nil
}

// fixed takes a setting the search depends on from the record, or refuses
// a different given value. A zero recorded value was not recorded (an
// older record): the given or default value is recorded from now on.
func (k *Continuation) fixed(field, name string, rec, given any, isGiven bool, take func()) error {
	switch {
	case reflect.ValueOf(rec).IsZero():
		k.Recorded = append(k.Recorded, name)
	case !isGiven:
		take()
		k.Taken = append(k.Taken, fmt.Sprintf("%s=%v", name, rec))
	case !reflect.DeepEqual(rec, given):
		return &SettingError{Field: field, Recorded: fmt.Sprint(rec), Given: fmt.Sprint(given), Why: fixedWhy}
	}
	return nil
}

// changeable takes a setting from the record unless one is given; a given
// value that differs is a change.
func (k *Continuation) changeable(field, name string, rec int, given *int, text func(int) string, now time.Time) {
	switch {
	case rec == 0:
		k.Recorded = append(k.Recorded, name)
	case *given == 0:
		*given = rec
		k.Taken = append(k.Taken, name+"="+text(rec))
	case *given != rec:
		k.Changes = append(k.Changes, schema.Change{At: now, Setting: name, From: text(rec), To: text(*given)})
	}
}

// continueRetries takes ErrorRetries from the record, or refuses another
// given value. A record without it is a run whose results were counted
// without retries: it continues with 0, so that its results count as
// they did, and an explicit other value is refused.
func continueRetries(rec *schema.Run, cfg *Config, k *Continuation) error {
	recorded, why := 0, fixedWhy
	if rec.ErrorRetries != nil {
		recorded = *rec.ErrorRetries
	} else {
		why = "the run was recorded before failed designs were retried, so its results count without retries (leave it out, or start a new run seeded from this one)"
		k.Recorded = append(k.Recorded, "error_retries")
	}
	switch {
	case cfg.ErrorRetries == nil:
		if rec.ErrorRetries != nil {
			k.Taken = append(k.Taken, fmt.Sprintf("error_retries=%d", recorded))
		}
		cfg.ErrorRetries = new(recorded)
	case *cfg.ErrorRetries != recorded:
		return &SettingError{Field: "ErrorRetries", Recorded: fmt.Sprint(recorded), Given: fmt.Sprint(*cfg.ErrorRetries), Why: why}
	}
	return nil
}

// continueEarlyStop takes the early-stopping rule from the record, or
// refuses another given one. A record without a rule (none, or a run
// recorded before rules existed) is a run that stops nothing early.
func continueEarlyStop(rec *schema.Run, cfg *Config, k *Continuation) error {
	given := cfg.EarlyStop
	if given != nil && given.Rule == RuleNone {
		given = nil
	}
	recorded := rec.EarlyStop
	if recorded != nil && recorded.Select == "" {
		// Recorded before Select was kept: its pool took no stopped
		// design, and goes on so whatever SelectDefault is now.
		e := *recorded
		e.Select = schema.SelectOff
		recorded = &e
	}
	if given != nil && given.Select == "" && recorded != nil {
		// The rule given again without a selection keeps the recorded one.
		e := *given
		e.Select = recorded.Select
		given, cfg.EarlyStop = &e, &e
	}
	switch {
	case cfg.EarlyStop == nil:
		cfg.EarlyStop = recorded
		if rec.EarlyStop != nil {
			k.Taken = append(k.Taken, "early_stop="+strings.ReplaceAll(runstate.EarlyStopText(recorded), " ", ","))
		}
	case !reflect.DeepEqual(given, recorded):
		return &SettingError{Field: "EarlyStop", Recorded: runstate.EarlyStopText(recorded), Given: runstate.EarlyStopText(given),
			Why: "it decides which designs are stopped, so it cannot change mid-run (leave it out to continue with the recorded rule, or start a new run seeded from this one)"}
	}
	return nil
}

// continueEvaluator takes the evaluator from the record, or refuses
// another given one: it decides what a result is. A run that failed fast
// is the exception: its evaluator did not work, and continuing it with a
// fixed one is the way out the failure names, recorded as a change. A
// record without one (a run recorded before evaluators were kept, or
// started by a controller given none) records the given one from now on.
func continueEvaluator(rec *schema.Run, cfg *Config, k *Continuation, now time.Time) error {
	switch {
	case rec.Evaluator != nil && cfg.Evaluator != nil && rec.Phase == schema.PhaseFailed && !reflect.DeepEqual(cfg.Evaluator, rec.Evaluator):
		k.Changes = append(k.Changes, schema.Change{At: now, Setting: "evaluator", From: rec.Evaluator.String(), To: cfg.Evaluator.String()})
	case rec.Evaluator == nil:
		if cfg.Evaluator != nil {
			k.Recorded = append(k.Recorded, "evaluator")
		}
	case cfg.Evaluator == nil:
		cfg.Evaluator = rec.Evaluator
		k.Taken = append(k.Taken, "evaluator="+strings.ReplaceAll(rec.Evaluator.String(), " ", "_"))
	case !reflect.DeepEqual(cfg.Evaluator, rec.Evaluator):
		return &SettingError{Field: "Evaluator", Recorded: rec.Evaluator.String(), Given: cfg.Evaluator.String(),
			Why: "it decides what a result is, so it cannot change mid-run, only after the run failed fast (leave the evaluator settings out to continue with the recorded evaluator; a worker whose node needs another path may be given its own, which its log and status then show)"}
	}
	return nil
}

// continueQuarantine takes QuarantineAfter from the record unless one is
// given; a given value that differs is a change. A record without it
// takes the given or default value from now on.
func continueQuarantine(rec *schema.Run, cfg *Config, k *Continuation, now time.Time) {
	switch {
	case rec.QuarantineAfter == nil:
		k.Recorded = append(k.Recorded, "quarantine_after")
	case cfg.QuarantineAfter == nil:
		cfg.QuarantineAfter = new(*rec.QuarantineAfter)
		k.Taken = append(k.Taken, fmt.Sprintf("quarantine_after=%d", *rec.QuarantineAfter))
	case *cfg.QuarantineAfter != *rec.QuarantineAfter:
		k.Changes = append(k.Changes, schema.Change{At: now, Setting: "quarantine_after",
			From: fmt.Sprint(*rec.QuarantineAfter), To: fmt.Sprint(*cfg.QuarantineAfter)})
	}
}

// continueBudget compares a given budget with the one given before: the
// recorded budget less the designs made up for a failed start (see
// MakeUp), which the run keeps on top of any budget given.
func continueBudget(rec *schema.Run, cfg *Config, k *Continuation, now time.Time) error {
	own := rec.Budget - rec.MadeUp
	switch {
	case cfg.Budget == 0:
		cfg.Budget = rec.Budget
		k.Taken = append(k.Taken, fmt.Sprintf("budget=%d", rec.Budget))
	case cfg.Budget < own && extended(rec, "budget"):
		// A job requeued with the flags it was submitted with gives the
		// budget that `evoq run extend` raised since: the raise stands.
		k.Taken = append(k.Taken, fmt.Sprintf("budget=%d (raised by run extend; --budget %d is below it)", own, cfg.Budget))
		cfg.Budget = rec.Budget
	case cfg.Budget < own:
		return &SettingError{Field: "Budget", Recorded: fmt.Sprint(own), Given: fmt.Sprint(cfg.Budget),
			Why: "a budget can grow mid-run but not shrink, since designs beyond the smaller one may be published already (stop the run instead)"}
	case cfg.Budget > own:
		k.Changes = append(k.Changes, schema.Change{At: now, Setting: "budget", From: fmt.Sprint(own), To: fmt.Sprint(cfg.Budget)})
		cfg.Budget += rec.MadeUp
	default:
		cfg.Budget = rec.Budget
	}
	return nil
}

// continueSpace takes the recorded search space itself (its YAML), or
// checks that a given one is the same text.
func continueSpace(rec *schema.Run, cfg *Config, k *Continuation) error {
	if len(rec.SpaceYAML) == 0 {
		if cfg.Space == nil {
			return fmt.Errorf("%w: Space: the run's record holds no search space and none is given", ErrConfig)
		}
		k.Recorded = append(k.Recorded, "space")
		return nil
	}
	if cfg.Space != nil {
		if !bytes.Equal(bytes.TrimSpace(cfg.Space.Source()), bytes.TrimSpace(rec.SpaceYAML)) {
			return &SettingError{Field: "Space", Recorded: spaceText(rec.Space, rec.SpaceYAML),
				Given: spaceText(cfg.Space.Name(), cfg.Space.Source()), Why: fixedWhy}
		}
		return nil
	}
	sp, err := space.Parse(rec.SpaceYAML)
	if err != nil {
		return fmt.Errorf("%w: Space: the run's recorded search space does not parse: %v", ErrConfig, err)
	}
	cfg.Space = sp
	k.Taken = append(k.Taken, "space="+sp.Name())
	return nil
}

// spaceText names a search space and the digest of its text, which is
// what two spaces are compared by.
func spaceText(name string, yaml []byte) string {
	return fmt.Sprintf("%q (text sha256 %.12x)", name, sha256.Sum256(bytes.TrimSpace(yaml)))
}

// continueSeeds takes the recorded seed genomes: seeds are taken from the
// earlier run once, when the run starts, so a restart does not re-pick
// them from a store that may have changed since.
func continueSeeds(rec *schema.Run, cfg *Config, k *Continuation) error {
	older := rec.Tournament == 0 // recorded before seeds were kept
	switch {
	case older:
		return nil
	case cfg.SeedsFrom != "" && cfg.SeedsFrom != rec.SeedsFrom:
		recorded := rec.SeedsFrom
		if recorded == "" {
			recorded = "no seeds"
		}
		return &SettingError{Field: "SeedsFrom", Recorded: recorded, Given: cfg.SeedsFrom,
			Why: "seeds are the first designs of a run and are taken when it starts (start a new run to seed it from another)"}
	}
	cfg.SeedsFrom, cfg.Seeds = rec.SeedsFrom, rec.Seeds
	if rec.SeedsFrom != "" {
		k.Taken = append(k.Taken, fmt.Sprintf("from_run=%s (%d seeds)", rec.SeedsFrom, len(rec.Seeds)))
	}
	return nil
}

// Resolve returns the settings the controller runs with: for a run the
// run bucket already records, cfg continued from that record (see
// Continue); for a new one, cfg. Either way with defaults applied and
// validated. The continuation is nil for a new run.
func Resolve(ctx context.Context, js jetstream.JetStream, cfg Config) (Config, *Continuation, error) {
	rec, err := LoadRun(ctx, js, cfg.Run, cfg.Logger)
	if err != nil {
		return cfg, nil, err
	}
	return resolve(rec, cfg, time.Now)
}

func resolve(rec *schema.Run, cfg Config, now func() time.Time) (Config, *Continuation, error) {
	if cfg.Now != nil {
		now = cfg.Now
	}
	cfg, k, err := Continue(rec, cfg, now())
	if err != nil {
		return cfg, nil, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, nil, err
	}
	if cfg.TimeBudget > 0 && cfg.Deadline.IsZero() {
		cfg.Deadline = now().Add(cfg.TimeBudget)
	}
	return cfg.withDefaults(), k, nil
}

// ErrRecord means a run's record does not decode.
var ErrRecord = errors.New("the run's record does not decode")

// LoadRun reads run's record from the run bucket; nil, with no error,
// when the run is new. Like the controller's other first requests it is
// retried for up to StartRetry: a JetStream cluster that is starting, or
// electing leaders, leaves requests unanswered for a few seconds. log
// gets a warning per failed attempt; nil discards them.
func LoadRun(ctx context.Context, js jetstream.JetStream, run string, log logrus.FieldLogger) (*schema.Run, error) {
	if log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		log = l
	}
	var rec *schema.Run
	err := startRetry(ctx, log, "read the record of run "+run, func() (err error) {
		rec, err = loadRun(ctx, js, run)
		return err
	})
	return rec, err
}

func loadRun(ctx context.Context, js jetstream.JetStream, run string) (*schema.Run, error) {
	kv, err := js.KeyValue(ctx, schema.RunBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", schema.RunBucket, err)
	}
	e, err := kv.Get(ctx, run)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the record of run %s: %w", run, err)
	}
	rec, err := schema.DecodeRun(e.Value())
	if err != nil {
		return nil, fmt.Errorf("%w: run %s (start a new run under another run ID): %v", ErrRecord, run, err)
	}
	return rec, nil
}

// Fields are the continuation's figures for the log line that says how a
// restarted run continues.
func (k *Continuation) Fields() map[string]any {
	f := map[string]any{"taken": strings.Join(k.Taken, " ")}
	if len(k.Changes) > 0 {
		ch := make([]string, len(k.Changes))
		for i, c := range k.Changes {
			ch[i] = fmt.Sprintf("%s %s->%s", c.Setting, c.From, c.To)
		}
		f["changed"] = strings.Join(ch, " ")
	}
	if len(k.Recorded) > 0 {
		f["recorded_now"] = strings.Join(k.Recorded, " ")
	}
	return f
}

// continueCheckpoints takes the checkpoint settings from the record,
// field by field. The store is fixed: the pool's checkpoints are in it.
// The limit, what is kept and inheritance decide nothing the fold reads,
// so a given value that differs is a change. A record without them (a run
// recorded before checkpoints existed) takes the given or default ones.
func continueCheckpoints(rec *schema.Run, cfg *Config, k *Continuation, now time.Time) error {
	r, c := rec.Checkpoints, &cfg.Checkpoints
	if r == nil {
		k.Recorded = append(k.Recorded, "checkpoints")
		return nil
	}
	where := func(dir string) string {
		if dir == "" {
			return "the broker's object store"
		}
		return dir
	}
	switch {
	case c.Dir == "" && r.Store == schema.CheckpointDir:
		c.Dir = r.Dir
		k.Taken = append(k.Taken, "checkpoint_dir="+r.Dir)
	case c.Dir != "" && c.Dir != r.Dir:
		return &SettingError{Field: "Checkpoints.Dir", Recorded: where(r.Dir), Given: c.Dir,
			Why: "the run's checkpoints are in its recorded store, so it cannot change mid-run (leave it out to continue with the recorded store)"}
	}
	takeOrChange(k, "keep_checkpoints", &c.Keep, c.Keep != "", r.Keep, now)
	takeOrChange(k, "max_checkpoint", &c.Max, c.Max != 0, r.Max, now)
	inherit := c.Inherit != nil && *c.Inherit
	takeOrChange(k, "inherit", &inherit, c.Inherit != nil, r.Inherit, now)
	c.Inherit = &inherit
	return nil
}

// takeOrChange takes a setting from the record unless one is given; a
// given value that differs is a change.
func takeOrChange[V comparable](k *Continuation, name string, given *V, isGiven bool, recorded V, now time.Time) {
	switch {
	case !isGiven:
		*given = recorded
		k.Taken = append(k.Taken, fmt.Sprintf("%s=%v", name, recorded))
	case *given != recorded:
		k.Changes = append(k.Changes, schema.Change{At: now, Setting: name, From: fmt.Sprint(recorded), To: fmt.Sprint(*given)})
	}
}

// continueSearch takes the objectives and the variation operators from
// the record, or refuses others given; the reference point may change. A
// run recorded before objectives were kept optimized fitness alone; one
// recorded before operators were kept altered one parameter of one
// parent, and goes on doing so.
func continueSearch(rec *schema.Run, cfg *Config, k *Continuation, now time.Time) error {
	recObj, err := runstate.ObjectivesOf(rec)
	if err != nil {
		return fmt.Errorf("%w: Objectives: %v", ErrConfig, err)
	}
	switch {
	case cfg.Objectives.Objs == nil && cfg.Objectives.Cons == nil:
		cfg.Objectives = recObj
		if recObj.Pareto() {
			k.Taken = append(k.Taken, "objectives="+strings.ReplaceAll(recObj.String(), " ", "_"))
		}
	case cfg.Objectives.String() != recObj.String():
		return &SettingError{Field: "Objectives", Recorded: recObj.String(), Given: cfg.Objectives.String(),
			Why: "they decide which designs the pool keeps, so they cannot change mid-run (leave them out to continue with the recorded ones, or start a new run seeded from this one)"}
	}
	switch {
	case cfg.HVRef == nil:
		cfg.HVRef = rec.HVRef
	case !slices.Equal(cfg.HVRef, rec.HVRef):
		k.Changes = append(k.Changes, schema.Change{At: now, Setting: "hv_ref", From: runstate.RefText(rec.HVRef), To: runstate.RefText(cfg.HVRef)})
	}
	v, why := rec.Variation, fixedWhy
	if v == nil {
		v = &schema.Variation{}
		why = "the run was recorded before variation operators were kept, so it made its mutants by altering one parameter of one parent, and goes on doing so (leave them out, or start a new run seeded from this one)"
		k.Recorded = append(k.Recorded, "variation")
	}
	for _, op := range []struct {
		field, name string
		given       **float64
		rec         float64
	}{{"Crossover", "crossover", &cfg.Crossover, v.Crossover}, {"MutationRate", "mutation_rate", &cfg.MutationRate, v.MutationRate},
		{"CostTie", "cost_tie", &cfg.CostTie, v.CostTie}} {
		switch {
		case *op.given == nil:
			*op.given = new(op.rec)
			if rec.Variation != nil {
				k.Taken = append(k.Taken, fmt.Sprintf("%s=%g", op.name, op.rec))
			}
		case **op.given != op.rec:
			return &SettingError{Field: op.field, Recorded: fmt.Sprint(op.rec), Given: fmt.Sprint(**op.given), Why: why}
		}
	}
	// A run recorded before Novel was kept has false: its children may
	// repeat evaluated designs, and go on doing so.
	switch {
	case cfg.Novel == nil:
		cfg.Novel = new(v.Novel)
		if rec.Variation != nil {
			k.Taken = append(k.Taken, fmt.Sprintf("novel=%t", v.Novel))
		}
	case *cfg.Novel != v.Novel:
		return &SettingError{Field: "Novel", Recorded: fmt.Sprint(v.Novel), Given: fmt.Sprint(*cfg.Novel), Why: why}
	}
	return nil
}

// continueStopRule takes Target, Plateau and the time budget from the
// record unless given; a given value that differs is a change.
func continueStopRule(rec *schema.Run, cfg *Config, k *Continuation, now time.Time) {
	switch {
	case cfg.Target == nil:
		cfg.Target = rec.Target
		if rec.Target != nil {
			k.Taken = append(k.Taken, "target="+runstate.TargetText(rec.Target))
		}
	case rec.Target == nil || *cfg.Target != *rec.Target:
		k.Changes = append(k.Changes, schema.Change{At: now, Setting: "target", From: runstate.TargetText(rec.Target), To: runstate.TargetText(cfg.Target)})
	}
	switch {
	case cfg.Plateau == 0:
		cfg.Plateau = rec.Plateau
		if rec.Plateau > 0 {
			k.Taken = append(k.Taken, fmt.Sprintf("plateau=%d", rec.Plateau))
		}
	case cfg.Plateau != rec.Plateau:
		k.Changes = append(k.Changes, schema.Change{At: now, Setting: "plateau", From: runstate.PlateauText(rec.Plateau), To: runstate.PlateauText(cfg.Plateau)})
	}
	switch {
	case cfg.TimeBudget == 0 || (cfg.TimeBudget == rec.TimeBudget && now.Before(rec.Deadline)):
		cfg.TimeBudget, cfg.Deadline = rec.TimeBudget, rec.Deadline
		if rec.TimeBudget > 0 {
			k.Taken = append(k.Taken, "time_budget="+rec.TimeBudget.String(), "deadline="+rec.Deadline.UTC().Format(time.RFC3339))
		}
	case cfg.TimeBudget < rec.TimeBudget && extended(rec, "time_budget") && now.Before(rec.Deadline):
		// As the budget: the flags a job was submitted with do not undo
		// a raise by `evoq run extend` while its deadline is ahead.
		k.Taken = append(k.Taken, "time_budget="+rec.TimeBudget.String()+" (raised by run extend; --time-budget "+cfg.TimeBudget.String()+" is below it)",
			"deadline="+rec.Deadline.UTC().Format(time.RFC3339))
		cfg.TimeBudget, cfg.Deadline = rec.TimeBudget, rec.Deadline
	default:
		cfg.Deadline = now.Add(cfg.TimeBudget)
		k.Changes = append(k.Changes, schema.Change{At: now, Setting: "deadline", From: deadlineText(rec.Deadline), To: deadlineText(cfg.Deadline)})
	}
}

func deadlineText(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.UTC().Format(time.RFC3339)
}

// extended reports whether `evoq run extend` raised setting of the run
// since it last changed otherwise: its last change in rec is one.
func extended(rec *schema.Run, setting string) bool {
	for i := len(rec.Changes) - 1; i >= 0; i-- {
		if ch := rec.Changes[i]; ch.Setting == setting {
			return ch.Via == schema.ViaExtend
		}
	}
	return false
}
