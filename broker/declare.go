package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// Consumer defaults.
const (
	AckWaitDefault    = 30 * time.Second
	MaxDeliverDefault = 3
	// MinWaiting and MinAckPending are floors for the consumer limits, so a
	// run sized for a few slots still takes workers that join later.
	MinWaiting    = 4096
	MinAckPending = 1024
	// DuplicatesDefault is the dedupe window of both streams: a design or
	// result republished within it (a retry, a restarted controller) is
	// stored once.
	DuplicatesDefault = 10 * time.Minute
	// PresenceTTL is how long a worker's last heartbeat stays in the
	// presence bucket.
	PresenceTTL = 5 * time.Minute
	// LeaseTTL is how long a controller's lease on its run outlives its
	// last renewal: a dead controller's run is free again within it. It
	// is several renewals long (see controller.LeaseRenew), so a loaded
	// machine or a leader election does not cost a live controller its
	// run.
	LeaseTTL = 8 * time.Second
)

// HeartbeatDefault is how often a worker renews its presence; a presence
// older than three heartbeats is stale.
const HeartbeatDefault = time.Second

// MinAckWait is the shortest ack wait a run may have: three worker
// heartbeats. A live worker renews each design it evaluates every third of
// the ack wait; shorter, a loaded worker's renewals would come late and
// its designs be redelivered while it still works on them.
const MinAckWait = 3 * HeartbeatDefault

// ErrLimit means a consumer limit is below what the live slots need.
var ErrLimit = errors.New("consumer limit below live slots")

// Declare creates or updates the design, result and report streams and the
// presence and run buckets. It is idempotent. They are kept with one copy
// unless WithReplicas says otherwise; a stream or bucket that has more
// copies already is refused with ErrReplicas rather than lowered, since
// every run on the broker shares them.
func Declare(ctx context.Context, js jetstream.JetStream, opts ...DeclareOption) error {
	o := declareOptions{replicas: 1}
	for _, opt := range opts {
		opt(&o)
	}
	if err := CheckReplicas(o.replicas); err != nil {
		return err
	}
	if err := checkAccount(ctx, js, declaredStreams()); err != nil {
		return err
	}
	var made []string
	err := declare(ctx, js, o.replicas, &made)
	if errors.Is(err, ErrAccount) {
		// Nothing half-declared is left behind by a refusal that
		// waiting does not mend.
		for _, name := range made {
			_ = js.DeleteStream(ctx, name)
		}
	}
	return err
}

// declaredStreams are the names of the streams Declare makes, the
// buckets' among them.
func declaredStreams() []string {
	var names []string
	for _, cfg := range streamConfigs(1) {
		names = append(names, cfg.Name)
	}
	for _, cfg := range bucketConfigs(1) {
		names = append(names, "KV_"+cfg.Bucket)
	}
	return names
}

// declare declares the streams and buckets, adding to made the names of
// those it created.
func declare(ctx context.Context, js jetstream.JetStream, replicas int, made *[]string) error {
	existed := func(name string) bool {
		_, err := js.Stream(ctx, name)
		return !errors.Is(err, jetstream.ErrStreamNotFound)
	}
	for _, cfg := range streamConfigs(replicas) {
		if err := keepsReplicas(ctx, js, cfg.Name, replicas); err != nil {
			return err
		}
		there := existed(cfg.Name)
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("declare stream %s: %w", cfg.Name, accountErr(js, replicasErr(err, cfg.Name, replicas)))
		}
		if !there {
			*made = append(*made, cfg.Name)
		}
	}
	for _, cfg := range bucketConfigs(replicas) {
		if err := keepsReplicas(ctx, js, "KV_"+cfg.Bucket, replicas); err != nil {
			return err
		}
		there := existed("KV_" + cfg.Bucket)
		if err := declareBucket(ctx, js, cfg, there); err != nil {
			return fmt.Errorf("declare bucket %s: %w", cfg.Bucket, accountErr(js, replicasErr(err, "KV_"+cfg.Bucket, replicas)))
		}
		if !there {
			*made = append(*made, "KV_"+cfg.Bucket)
		}
	}
	return nil
}

// declareBucket creates or updates the bucket cfg. The presence bucket,
// which workers write to, takes no roll-up (DenyRollups); once it exists
// it is updated as a stream, since nats.go's update of a bucket turns
// roll-ups back on, for as long as it takes to turn them off again.
func declareBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, there bool) error {
	if cfg.Bucket != schema.PresenceBucket {
		_, err := js.CreateOrUpdateKeyValue(ctx, cfg)
		return err
	}
	if !there {
		if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			return err
		}
	}
	return DenyRollups(ctx, js, "KV_"+cfg.Bucket, func(c *jetstream.StreamConfig) {
		c.Description, c.MaxAge, c.Replicas = cfg.Description, cfg.TTL, max(cfg.Replicas, 1)
	})
}

func streamConfigs(replicas int) []jetstream.StreamConfig {
	return []jetstream.StreamConfig{{
		Name:        schema.DesignStream,
		Description: "evoq designs waiting for a worker slot (work queue)",
		Subjects:    []string{schema.DesignPrefix + "*"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  DuplicatesDefault,
		MaxMsgSize:  schema.MaxMessageSize,
		Replicas:    replicas,
	}, {
		Name:        schema.ResultStream,
		Description: "evoq terminal results: the durable history of every run",
		Subjects:    []string{schema.ResultPrefix + "*"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  DuplicatesDefault,
		MaxMsgSize:  schema.MaxMessageSize,
		Replicas:    replicas,
	}, {
		// A stream of its own, not the results': a design may report
		// many times, and tools that count results need not read past
		// its curve; the early-stopping rules read this stream alone.
		Name:        schema.ReportStream,
		Description: "evoq intermediate reports: every evaluation's learning curve",
		Subjects:    []string{schema.ReportPrefix + "*"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  DuplicatesDefault,
		MaxMsgSize:  schema.MaxMessageSize,
		Replicas:    replicas,
	}}
}

func bucketConfigs(replicas int) []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{{
		Bucket:      schema.PresenceBucket,
		Description: "evoq worker heartbeats",
		TTL:         PresenceTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}, {
		Bucket:      schema.RunBucket,
		Description: "evoq run states",
		History:     4,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}, {
		Bucket:      schema.LeaseBucket,
		Description: "evoq controller leases: which controller runs each run",
		TTL:         LeaseTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}}
}

// ConsumerConfig sizes a run's durable pull consumer.
type ConsumerConfig struct {
	// Slots is the number of slots the run expects; the wait and
	// ack-pending limits are sized from it. Defaults to 1.
	Slots int
	// AckWait is how long a design may go without an ack or an
	// InProgress heartbeat before it is redelivered. Defaults to
	// AckWaitDefault.
	AckWait time.Duration
	// MaxDeliver is the redelivery limit. Defaults to MaxDeliverDefault.
	MaxDeliver int
	// Replicas is the replica count the streams were declared with (see
	// WithReplicas). The consumer follows its stream: a work-queue
	// consumer is kept on every replica of the stream, whatever is asked.
	// Defaults to 0, the stream's.
	Replicas int
}

// WaitingFor is the MaxWaiting a consumer needs for slots: every free slot
// holds one pull request.
func WaitingFor(slots int) int { return max(MinWaiting, 4*slots) }

// AckPendingFor is the MaxAckPending a consumer needs for slots busy slots
// and margin queued designs.
func AckPendingFor(slots int) int { return max(MinAckPending, 4*slots) }

// DeclareConsumer creates the durable pull consumer of run, or updates it.
// MaxWaiting cannot change after creation, so an existing consumer keeps its
// own; the caller checks it with CheckLimits as slots join.
func DeclareConsumer(ctx context.Context, js jetstream.JetStream, run string, cc ConsumerConfig) (jetstream.Consumer, error) {
	cc.Slots = max(cc.Slots, 1)
	if cc.AckWait <= 0 {
		cc.AckWait = AckWaitDefault
	}
	if cc.MaxDeliver == 0 {
		cc.MaxDeliver = MaxDeliverDefault
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       schema.ConsumerName(run),
		Description:   "evoq workers of run " + run,
		FilterSubject: schema.DesignSubject(run),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cc.AckWait,
		MaxDeliver:    cc.MaxDeliver,
		MaxWaiting:    WaitingFor(cc.Slots),
		MaxAckPending: AckPendingFor(cc.Slots),
		Replicas:      cc.Replicas,
	}
	if old, err := js.Consumer(ctx, schema.DesignStream, cfg.Durable); err == nil {
		info := old.CachedInfo()
		cfg.MaxWaiting = info.Config.MaxWaiting
		cfg.MaxAckPending = max(cfg.MaxAckPending, info.Config.MaxAckPending)
	}
	c, err := js.CreateOrUpdateConsumer(ctx, schema.DesignStream, cfg)
	if err != nil {
		return nil, fmt.Errorf("declare consumer %s: %w", cfg.Durable, accountErr(js, err))
	}
	return c, nil
}

// CheckLimits reports ErrLimit when the consumer's MaxWaiting or
// MaxAckPending is below what slots live slots need.
func CheckLimits(info *jetstream.ConsumerInfo, slots int) error {
	if w := info.Config.MaxWaiting; w < slots {
		return fmt.Errorf("%w: %s MaxWaiting %d < %d live slots; free slots beyond it get no design (MaxWaiting cannot be changed: start a new run sized with --expect-slots >= %d)",
			ErrLimit, info.Name, w, slots, slots)
	}
	if p := info.Config.MaxAckPending; p > 0 && p < slots {
		return fmt.Errorf("%w: %s MaxAckPending %d < %d live slots", ErrLimit, info.Name, p, slots)
	}
	return nil
}

// RaiseAckPending raises the consumer's MaxAckPending to what slots need,
// if it is lower. It is how the limit follows the live slot count.
func RaiseAckPending(ctx context.Context, js jetstream.JetStream, c jetstream.Consumer, slots int) error {
	info, err := c.Info(ctx) // fresh: the cached info predates earlier raises
	if err != nil {
		return fmt.Errorf("consumer info: %w", err)
	}
	need := AckPendingFor(slots)
	if info.Config.MaxAckPending < 0 || info.Config.MaxAckPending >= need {
		return nil
	}
	cfg := info.Config
	cfg.MaxAckPending = need
	if _, err := js.UpdateConsumer(ctx, schema.DesignStream, cfg); err != nil {
		return fmt.Errorf("raise MaxAckPending of %s to %d: %w", info.Name, need, err)
	}
	return nil
}
