package coord

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"

	"github.com/agentmesh/mesh/coord/chat"
	"github.com/agentmesh/mesh/coord/debuglog"
	"github.com/agentmesh/mesh/internal/atomicfile"
	"github.com/agentmesh/mesh/internal/httpx"
)

// Messages served per page of a timeline: by default, and at most.
const (
	defaultPage = 50
	maxPage     = 500
)

var (
	errChatOff   = httpx.E(http.StatusServiceUnavailable, "chat_disabled", "chat is disabled: start the daemon with --agent-cmd")
	errConvID    = httpx.E(http.StatusBadRequest, "invalid_conv", "conv must be 1 to 64 letters, digits, '-' or '_'")
	errNoConv    = httpx.E(http.StatusNotFound, "conv_not_found", "no such conversation")
	errQueueFull = httpx.E(http.StatusTooManyRequests, "queue_full", "the conversation's queue is full")
	errTooMany   = httpx.E(http.StatusTooManyRequests, "too_many_conversations", "too many conversations")
	errNoContent = httpx.E(http.StatusBadRequest, "no_content", "the message has no text and none of its attachments could be kept")
)

// newChat makes the conversation engine, wired to the roadmap (anchors),
// the runs and the socket.
func (d *Daemon) newChat() (*chat.Engine, error) {
	c := d.cfg.Chat
	c.Dir, c.Project, c.Clock, c.Logger = filepath.Join(d.cfg.StateDir, "chat"), d.cfg.Dir, d.cfg.Clock, d.log
	c.ArchiveDir, c.Files, c.Env = filepath.Join(d.cfg.StateDir, "chat-archive"), d.files, d.environ
	c.Emit, c.CheckAnchor, c.TurnEnded = d.events.publish, d.checkAnchor, d.turnEnded
	c.Coordinating = func(conv string) bool { return d.runs.Coordinating(conv) }
	c.Redact = d.redact
	e, err := chat.New(c)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return e, nil
}

// redact blanks secrets out of text the daemon serves of an agent's
// failure, as the debug log does (the known values of the environments
// included, once the log is open).
func (d *Daemon) redact(s string) string {
	if d.dlog == nil {
		return debuglog.RedactText(s, nil)
	}
	return d.dlog.RedactText(s)
}

// checkAnchor accepts an anchor that names an initiative of the roadmap
// (and, when it names one, a task of it).
func (d *Daemon) checkAnchor(a chat.Anchor) error {
	if a.Task != "" {
		if _, ok := d.findTask(a.Initiative + "/" + a.Task); !ok {
			return fmt.Errorf("no task %q in initiative %q", a.Task, a.Initiative)
		}
		return nil
	}
	for _, in := range d.current().roadmap.Initiatives {
		if in.ID == a.Initiative {
			return nil
		}
	}
	return fmt.Errorf("no initiative %q", a.Initiative)
}

type dispatchReq struct {
	Conv        string        `json:"conv"`
	Text        string        `json:"text"`
	AgentID     string        `json:"agent_id"`
	Attachments []chat.Upload `json:"attachments"`
}

func (d *Daemon) dispatch(w http.ResponseWriter, r *http.Request) error {
	if !d.chat.Enabled() {
		return errChatOff
	}
	body, err := httpx.ReadBody(w, r, d.cfg.Chat.BodyMax())
	if err != nil {
		return err
	}
	var req dispatchReq
	if err := httpx.DecodeJSON(body, &req); err != nil {
		return err
	}
	if len(req.AgentID) > 128 {
		return httpx.ErrInvalid.With("agent_id is longer than 128 bytes")
	}
	res, err := d.chat.Dispatch(chat.Request{Conv: req.Conv, Text: req.Text, AgentID: req.AgentID, Uploads: req.Attachments})
	if errors.Is(err, chat.ErrNoContent) {
		// An error with the attachments it skipped, and why.
		httpx.WriteJSON(w, errNoContent.Status, map[string]any{"code": errNoContent.Code, "detail": err.Error(), "skipped_uploads": res.Skipped})
		return nil
	}
	if err != nil {
		return chatError(err)
	}
	status := http.StatusOK
	if !res.Started {
		status = http.StatusAccepted
	}
	httpx.WriteJSON(w, status, res)
	return nil
}

// chatError maps the engine's errors to answers.
func chatError(err error) error {
	for _, m := range []struct {
		err error
		as  *httpx.Error
	}{{chat.ErrDisabled, errChatOff}, {chat.ErrConvID, errConvID}, {chat.ErrNoConv, errNoConv},
		{chat.ErrQueueFull, errQueueFull}, {chat.ErrTooMany, errTooMany}, {chat.ErrText, httpx.ErrInvalid},
		{atomicfile.ErrOutside, errOutside}} {
		if errors.Is(err, m.err) {
			return m.as.With("%v", err)
		}
	}
	return err
}

func (d *Daemon) chatSnapshot(w http.ResponseWriter, _ *http.Request) error {
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"enabled": d.chat.Enabled(), "conversations": d.chat.Snapshot()})
	return nil
}

func (d *Daemon) convMessages(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, before := defaultPage, int64(0)
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPage {
			return httpx.ErrInvalid.With("limit must be 1..%d", maxPage)
		}
		limit = n
	}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return httpx.ErrInvalid.With("before must be a message id")
		}
		before = n
	}
	id := r.PathValue("id")
	msgs, more, err := d.chat.Messages(id, before, limit)
	if err != nil {
		return chatError(err)
	}
	page := map[string]any{"conv": id, "messages": msgs, "has_more": more}
	if more && len(msgs) > 0 {
		page["next_before"] = msgs[0].ID
	}
	httpx.WriteJSON(w, http.StatusOK, page)
	return nil
}

func (d *Daemon) convQueue(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	items, live, err := d.chat.Queue(id)
	if err != nil {
		return chatError(err)
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"conv": id, "live": live, "queue": items})
	return nil
}
