// Package chat runs the conversations of the coordination daemon: an
// operator's message starts a turn of a coding-agent subprocess (any
// command; the message on its stdin, its stdout streamed line by line), or
// waits in the conversation's queue behind the live turn. Transient
// upstream errors of the agent are retried for the same turn with backoff;
// anchor lines in its output bind the conversation to an initiative or a
// task. Timelines, queues and anchors are kept on disk, one folder per
// conversation, and survive restarts. It does not read the roadmap: the
// daemon hands it a function that checks anchors.
package chat
