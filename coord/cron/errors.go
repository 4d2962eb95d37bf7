package cron

import "errors"

var (
	// ErrSchedule is a cron expression that is not five plain fields.
	ErrSchedule = errors.New("invalid cron schedule")
	// ErrJob is a cron job whose fields are unusable; it is skipped.
	ErrJob = errors.New("invalid cron job")
	// ErrCwd is a job's cwd that is no folder inside the project: the run
	// fails without starting.
	ErrCwd = errors.New("unusable cron cwd")
)
