// Package cron runs a cluster's scheduled commands: five-field schedules
// checked strictly before a maintained cron library reads them, jobs
// validated with defaults, a scheduler that ticks on an injectable clock
// and fires only on the cluster's crons owner (other daemons report what
// they would have fired), runs killed at their maximum runtime, restarted
// per policy, and their last records kept on disk.
package cron
