package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrAccount means the broker's account cannot hold a run and waiting
// will not change it: JetStream is not enabled for it, its limits leave
// no room for evoq's streams and buckets, or the credential may not use
// the JetStream API. Retry returns it at once; the command line exits 2.
var ErrAccount = errors.New("the account cannot hold an evoq run")

// AccountNeeds says what an evoq run needs of a NATS account, for the
// errors of ErrAccount and the operator's guide.
const AccountNeeds = "an evoq run needs JetStream enabled for its account, room for 6 streams " +
	"(3 streams and 3 key-value buckets, shared by all runs: EVOQ_DESIGNS, EVOQ_RESULTS, EVOQ_REPORTS, " +
	"KV_evoq_presence, KV_evoq_runs, KV_evoq_leases) plus one object store per run with checkpoints, " +
	"a consumer per run and a few short-lived ones per client, and file storage for the results"

// JetStream error codes that waiting does not mend.
const (
	errCodeNotEnabledAccount = 10039 // jetstream not enabled for account
	errCodeNotEnabled        = 10076 // jetstream not enabled
	errCodeMaxStreams        = 10027 // maximum number of streams reached
	errCodeMaxConsumers      = 10026 // maximum consumers limit reached
	errCodeMemoryLimit       = 10028 // insufficient memory resources available
	errCodeMaxBytesRequired  = 10113 // account requires a stream config to have max bytes set
)

// AccountErr is accountErr for the callers that declare what Declare
// does not: a run's consumer, its checkpoint bucket.
func AccountErr(js jetstream.JetStream, err error) error { return accountErr(js, err) }

// accountErr turns err into ErrAccount, saying what the account lacks,
// when waiting cannot mend it; else it returns err as it is.
func accountErr(js jetstream.JetStream, err error) error {
	if err == nil || errors.Is(err, ErrAccount) {
		return err
	}
	var ae *jetstream.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode {
		case errCodeNotEnabledAccount, errCodeNotEnabled:
			return fmt.Errorf("%w: JetStream is not enabled for this account (%v); %s", ErrAccount, err, AccountNeeds)
		case errCodeMaxStreams:
			return fmt.Errorf("%w: the account's limit on streams is reached (%v); %s", ErrAccount, err, AccountNeeds)
		case errCodeMaxConsumers:
			return fmt.Errorf("%w: the account's limit on consumers is reached (%v); %s", ErrAccount, err, AccountNeeds)
		case errCodeMemoryLimit:
			return fmt.Errorf("%w: the account's memory limit leaves no room for a consumer (%v); %s", ErrAccount, err, AccountNeeds)
		case errCodeMaxBytesRequired:
			return fmt.Errorf("%w: the account requires every stream to set a maximum size, which evoq's streams, the history of every run, do not (%v); %s", ErrAccount, err, AccountNeeds)
		}
	}
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return fmt.Errorf("%w: JetStream is not enabled for this account (%v); %s", ErrAccount, err, AccountNeeds)
	}
	if js != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)) {
		// A refused request is never answered: the connection's last
		// error says why it timed out.
		if last := js.Conn().LastError(); errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), jsAPI) {
			return fmt.Errorf("%w: this credential may not use the JetStream API (%v): a controller needs the account's JetStream API in full, as an admin's credential has it", ErrAccount, last)
		}
	}
	return err
}

// CheckAccount reports ErrAccount, saying what the account lacks, when
// the broker's account cannot hold evoq's streams and buckets: JetStream
// not enabled, or too few streams left. A controller checks it before it
// reads or declares anything.
func CheckAccount(ctx context.Context, js jetstream.JetStream) error {
	return checkAccount(ctx, js, declaredStreams())
}

// checkAccount refuses, before anything is declared, an account without
// JetStream or without room for the streams and buckets of names that it
// does not hold yet: a refusal half-way would leave some declared.
func checkAccount(ctx context.Context, js jetstream.JetStream, names []string) error {
	info, err := js.AccountInfo(ctx)
	if err != nil {
		return accountErr(js, fmt.Errorf("account info: %w", err))
	}
	missing := 0
	for _, name := range names {
		if _, err := js.Stream(ctx, name); errors.Is(err, jetstream.ErrStreamNotFound) {
			missing++
		} else if err != nil {
			return accountErr(js, fmt.Errorf("stream %s: %w", name, err))
		}
	}
	if max := info.Limits.MaxStreams; max > 0 && info.Streams+missing > max {
		return fmt.Errorf("%w: the account holds %d streams of at most %d, and %d more are needed; %s", ErrAccount, info.Streams, max, missing, AccountNeeds)
	}
	return nil
}
