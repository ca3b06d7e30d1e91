package cli

import (
	"errors"
	"regexp"

	"github.com/evoq/evoq/controller"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/worker"
)

// The libraries name an invalid setting by its Config field; the command
// line names its flag. These tables are the one place that knows both.

// controllerFlag is the flag of each controller.Config field.
var controllerFlag = map[string]string{
	"Run": "--run", "Space": "--config", "Budget": "--budget", "Init": "--init", "Pool": "--pool",
	"Replace": "--replace", "Tournament": "--tournament", "Seed": "--seed", "Margin": "--margin",
	"ExpectSlots": "--expect-slots", "WaitSlots": "--wait-slots", "AckWait": "--ack-wait",
	"MaxDeliver": "--max-deliver", "Replicas": "--replicas", "Seeds": "--from-run", "SeedsFrom": "--from-run",
	"Progress": "--progress", "IdleAlarm": "--idle-alarm", "FailFast": "--fail-fast", "ErrorRetries": "--error-retries",
	"QuarantineAfter": "--quarantine-after", "EarlyStop": "--early-stop", "EarlyStop.Rule": "--early-stop",
	"EarlyStop.MinStep": "--min-step", "EarlyStop.MaxStep": "--max-step", "EarlyStop.Eta": "--eta", "EarlyStop.MaxStepGene": "--max-step-gene", "EarlyStop.Select": "--rung-select", "EarlyStop.Brackets": "--brackets",
	"Checkpoints.Dir": "--checkpoint-dir", "Checkpoints.Max": "--max-checkpoint", "Checkpoints.Keep": "--keep-checkpoints",
	"Checkpoints.Inherit": "--inherit", "Objectives": "--objectives", "HVRef": "--hv-ref", "Crossover": "--crossover",
	"MutationRate": "--mutation-rate", "CostTie": "--cost-tie", "Novel": "--novel", "Evaluator": "the evaluator",
}

// workerFlag is the flag of each worker.Config field.
var workerFlag = map[string]string{
	"Run": "--run", "ID": "--id", "Slots": "--slots", "SlotGPUs": "--gpus", "SlotGPUUUIDs": "--gpus", "EvalTimeout": "--eval-timeout",
	"Evaluator": "--evaluator", "Deadline": "--walltime", "WalltimeMargin": "--walltime-margin",
	"MinEvalTime": "--min-eval-time", "CheckpointDir": "--checkpoint-mount",
}

// configErr turns the controller's config errors into usage errors (exit
// code 2) that name flags; other errors pass unchanged.
func configErr(err error) error {
	var se *controller.SettingError
	if errors.As(err, &se) {
		return usageErr("%s %s: the run records %s; %s", flagOf(controllerFlag, se.Field), se.Given, se.Recorded, se.Why)
	}
	return fieldErr(err, controllerFlag, controller.ErrConfig)
}

// workerErr is configErr for the worker's config.
func workerErr(err error) error { return fieldErr(err, workerFlag, worker.ErrConfig) }

// fieldErr names the flags of a *schema.FieldError, in its field and in
// the fields its reason mentions.
func fieldErr(err error, flags map[string]string, sentinel error) error {
	var fe *schema.FieldError
	switch {
	case errors.As(err, &fe):
		reason := fe.Reason
		for _, f := range fe.Related {
			reason = regexp.MustCompile(`\b`+regexp.QuoteMeta(f)+`\b`).ReplaceAllLiteralString(reason, flagOf(flags, f))
		}
		if fe.Value == nil {
			return usageErr("%s: %s", flagOf(flags, fe.Field), reason)
		}
		return usageErr("%s %s: %s", flagOf(flags, fe.Field), schema.FieldValue(fe.Value), reason)
	case errors.Is(err, sentinel):
		return usageErr("%v", err)
	}
	return err
}

// flagOf is a field's flag; a field with none (set only by programs that
// use the library) keeps its name.
func flagOf(flags map[string]string, field string) string {
	if f, ok := flags[field]; ok {
		return f
	}
	return field
}
