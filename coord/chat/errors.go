package chat

import "errors"

var (
	// ErrDisabled: no agent command is configured.
	ErrDisabled = errors.New("chat is disabled: no agent command is configured")
	// ErrConvID is a conversation id that is not 1 to 64 letters, digits,
	// '-' or '_' starting with a letter or digit.
	ErrConvID = errors.New("invalid conversation id")
	// ErrNoConv is a conversation that does not exist.
	ErrNoConv = errors.New("no such conversation")
	// ErrQueueFull: the conversation's queue holds QueueMax messages.
	ErrQueueFull = errors.New("the conversation's queue is full")
	// ErrTooMany: there are MaxConvs conversations already.
	ErrTooMany = errors.New("too many conversations")
	// ErrText is an empty or too long message.
	ErrText = errors.New("invalid message text")
	// ErrNoContent is a message without text whose attachments were all
	// skipped.
	ErrNoContent = errors.New("nothing to send")
)
