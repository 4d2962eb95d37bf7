// Package update reads what the project's site publishes: the standard's
// version and its agent-instructions preamble, and the daemon's release
// file, whose first line names its version and checksum. It compares
// versions and installs a release over the running executable atomically;
// restarting the daemon is left to its caller.
package update
