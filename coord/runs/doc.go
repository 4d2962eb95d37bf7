// Package runs keeps the story runs of the coordination daemon: a run
// works through an ordered list of tasks in one conversation, one chat
// turn per task, and advances its cursor when a turn succeeds. It sends
// turns and hears of their end through functions the daemon hands it; it
// knows neither the chat engine nor the roadmap. Runs are kept on disk,
// one file each, and go on after a restart.
package runs
