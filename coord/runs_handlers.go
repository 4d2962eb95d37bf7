package coord

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/agentmesh/mesh/coord/chat"
	"github.com/agentmesh/mesh/coord/debuglog"
	"github.com/agentmesh/mesh/coord/roadmap"
	"github.com/agentmesh/mesh/coord/runs"
	"github.com/agentmesh/mesh/internal/httpx"
)

// maxRunTasks bounds the tasks of one run.
const maxRunTasks = 200

var (
	errNoRun    = httpx.E(http.StatusNotFound, "run_not_found", "no such run")
	errRunEnded = httpx.E(http.StatusConflict, "run_ended", "the run has ended")
	errRunsFull = httpx.E(http.StatusTooManyRequests, "too_many_runs", "too many runs are running")
	errNoTask   = httpx.E(http.StatusNotFound, "task_not_found", "no such task")
)

func (d *Daemon) newRuns() *runs.Manager {
	return runs.New(runs.Config{Dir: filepath.Join(d.cfg.StateDir, "runs"), Files: d.files, Keep: d.cfg.RunsKept, MaxRunning: d.cfg.RunsMax,
		Clock: d.cfg.Clock, Logger: d.log, Emit: d.runEvent, Send: d.sendTask, Pending: d.chat.Pending})
}

// runEvent publishes a run's event and records it in the debug log.
func (d *Daemon) runEvent(typ string, fields map[string]any) {
	d.events.publish(typ, fields)
	lvl := "info"
	if typ == "run.failed" {
		lvl = "warn"
	}
	conv, _ := fields["conv"].(string)
	d.debugEvent(debuglog.Event{Lvl: lvl, Tag: "runs", Msg: typ, Conv: conv, Data: fields})
}

// turnEnded records the end of a chat turn in the debug log (a failure
// with its class and the end of the agent's stderr, redacted as every
// debug event is) and tells the runs.
func (d *Daemon) turnEnded(conv string, it chat.Item, end chat.TurnEnd) {
	lvl, msg := "info", "chat turn answered"
	data := map[string]any{"item_id": it.ID, "run_id": it.RunID}
	if end.Class != "" {
		lvl, msg = "warn", "chat turn failed"
		data["error"], data["detail"] = end.Class, end.Detail
	}
	d.debugEvent(debuglog.Event{Lvl: lvl, Tag: "chat", Msg: msg, Conv: conv, AgentID: it.AgentID, Data: data})
	if it.RunID != "" {
		d.runs.TurnEnded(it.RunID, it.ID, end.Class == "")
	}
}

// sendTask sends a run's current task to its conversation.
func (d *Daemon) sendTask(r runs.Run) (string, error) {
	task := r.Tasks[r.Cursor]
	text := fmt.Sprintf("Story run %s: task %d of %d: %s", r.ID, r.Cursor+1, len(r.Tasks), task)
	if t, ok := d.findTask(task); ok {
		text += fmt.Sprintf(" (%s)\nTask file: %s\n", t.Title, t.File)
	}
	res, err := d.chat.Dispatch(chat.Request{Conv: r.Conv, Text: text, AgentID: r.AgentID, RunID: r.ID})
	return res.ItemID, err
}

// findTask looks up "initiative/task" in the roadmap.
func (d *Daemon) findTask(id string) (roadmap.Task, bool) {
	init, task, _ := strings.Cut(id, "/")
	for _, in := range d.current().roadmap.Initiatives {
		for _, t := range in.Tasks {
			if in.ID == init && t.ID == task {
				return t, true
			}
		}
	}
	return roadmap.Task{}, false
}

type runReq struct {
	Conv       string   `json:"conv"`
	AgentID    string   `json:"agent_id"`
	Initiative string   `json:"initiative"`
	Tasks      []string `json:"tasks"`
}

func (d *Daemon) createRun(w http.ResponseWriter, r *http.Request) error {
	if !d.chat.Enabled() {
		return errChatOff
	}
	body, err := httpx.ReadBody(w, r, maxBody)
	if err != nil {
		return err
	}
	var req runReq
	if err := httpx.DecodeJSON(body, &req); err != nil {
		return err
	}
	if !chat.ValidID(req.Conv) {
		return errConvID
	}
	tasks, err := d.runTasks(req)
	if err != nil {
		return err
	}
	run, err := d.runs.Create(req.Conv, req.AgentID, tasks)
	if errors.Is(err, runs.ErrTooMany) {
		return errRunsFull.With("%v", err)
	} else if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusCreated, run)
	return nil
}

// runTasks is the task list of a new run: the tasks given, each
// "initiative/task" of the roadmap, or else the initiative's tasks that
// are not done, in their order.
func (d *Daemon) runTasks(req runReq) ([]string, error) {
	var tasks []string
	if len(req.Tasks) == 0 && req.Initiative != "" {
		for _, in := range d.current().roadmap.Initiatives {
			for _, t := range in.Tasks {
				if in.ID == chat.Slug(req.Initiative) && t.Status != "done" {
					tasks = append(tasks, in.ID+"/"+t.ID)
				}
			}
		}
	}
	for _, id := range req.Tasks {
		init, task, _ := strings.Cut(id, "/")
		id = chat.Slug(init) + "/" + chat.Slug(task)
		if _, ok := d.findTask(id); !ok {
			return nil, errNoTask.With("no task %q: want initiative/task of the roadmap", id)
		}
		tasks = append(tasks, id)
	}
	switch {
	case len(tasks) == 0:
		return nil, httpx.ErrInvalid.With("a run needs tasks: give tasks, or an initiative with tasks that are not done")
	case len(tasks) > maxRunTasks:
		return nil, httpx.ErrInvalid.With("a run has at most %d tasks", maxRunTasks)
	case len(req.AgentID) > 128:
		return nil, httpx.ErrInvalid.With("agent_id is longer than 128 bytes")
	}
	return tasks, nil
}

func (d *Daemon) listRuns(w http.ResponseWriter, _ *http.Request) error {
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"runs": d.runs.List()})
	return nil
}

func (d *Daemon) cancelRun(w http.ResponseWriter, r *http.Request) error {
	run, err := d.runs.Cancel(r.PathValue("id"))
	switch {
	case errors.Is(err, runs.ErrNotFound):
		return errNoRun.With("no run %q", r.PathValue("id"))
	case errors.Is(err, runs.ErrEnded):
		return errRunEnded.With("run %s is %s", run.ID, run.Status)
	}
	if err := d.chat.Unqueue(run.Conv, run.Item); err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, run)
	return nil
}
