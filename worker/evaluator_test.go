package worker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

func TestFailed(t *testing.T) {
	t.Parallel()
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		status schema.Status
		errHas string
	}{
		{"live context", context.Background(), schema.StatusError, "disk full"},
		{"cancelled", cancelled, schema.StatusError, "disk full"},
		{"deadline passed", expired, schema.StatusTimeout, "timed out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := Failed(tc.ctx, errors.New("disk full"))
			if out.Status != tc.status || out.Fitness != schema.InfeasibleFitness || !strings.Contains(out.Error, tc.errHas) {
				t.Errorf("got %+v, want %s containing %q", out, tc.status, tc.errHas)
			}
		})
	}
}

func TestEvaluatorNames(t *testing.T) {
	t.Parallel()
	if (Command{}).Name() != "command" || (&Persistent{}).Name() != "persistent" {
		t.Error("evaluator names changed; configs refer to them")
	}
}
