package cli

import (
	"errors"
	"testing"

	"github.com/evoq/evoq/controller"
	"github.com/evoq/evoq/space"
	"github.com/evoq/evoq/worker"
)

// The libraries' field errors come out naming flags, with exit code 2.
func TestFieldErrorsNameFlags(t *testing.T) {
	t.Parallel()
	sp, err := space.Parse([]byte("params:\n  x: {type: int, min: 1, max: 9}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"a field and the field its reason names", controller.Config{Run: "r", Space: sp, Init: 5, Pool: 10}.Validate(),
			"--pool 10: is larger than --init 5: the pool is filled from the initial random designs; raise --init or lower --pool"},
		{"a duration", controller.Config{Run: "r", Space: sp, AckWait: 1500e6}.Validate(),
			"--ack-wait 1.5s: need at least 3s, three worker heartbeats; shorter, live workers would have their designs redelivered"},
		{"text is quoted", controller.Config{Run: "r", Space: sp, Replace: "best"}.Validate(), `--replace "best": want worst or oldest`},
		{"a field with no value", controller.Config{Run: "r"}.Validate(), "--config: no search space"},
		{"a recorded setting", &controller.SettingError{Field: "Seed", Recorded: "7", Given: "9", Why: "why"}, "--seed 9: the run records 7; why"},
		{"retries", controller.Config{Run: "r", Space: sp, ErrorRetries: new(-1)}.Validate(), "--error-retries -1: must be >= 0 (0 retries none)"},
		{"retries recorded", &controller.SettingError{Field: "ErrorRetries", Recorded: "1", Given: "2", Why: "why"}, "--error-retries 2: the run records 1; why"},
		{"quarantine", controller.Config{Run: "r", Space: sp, QuarantineAfter: new(-3)}.Validate(), "--quarantine-after -3: must be >= 0 (0 turns quarantine off)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := configErr(tt.err)
			if !errors.Is(got, errUsage) || got.Error() != "usage: "+tt.want {
				t.Errorf("configErr = %q\nwant usage: %q", got, tt.want)
			}
		})
	}
	_, err = worker.New(nil, worker.Config{Run: "r", ID: "w", Slots: -2, Evaluator: nil})
	if got := workerErr(err); got == nil || got.Error() != "usage: --slots -2: need at least 1" {
		t.Errorf("workerErr = %v", got)
	}
	other := errors.New("broker down")
	if got := configErr(other); got != other {
		t.Errorf("configErr changed an error that is not a config error: %v", got)
	}
}
