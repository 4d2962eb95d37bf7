package coord

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/mesh/coord/debuglog"
	"github.com/agentmesh/mesh/coord/instructions"
	"github.com/agentmesh/mesh/coord/roadmap"
	"github.com/agentmesh/mesh/internal/atomicfile"
	"github.com/agentmesh/mesh/internal/httpx"
)

// maxBody bounds request bodies: a reorder or a debug event.
const maxBody = 64 << 10

// Errors the daemon answers with, besides httpx's.
var (
	errWall        = httpx.E(http.StatusBadRequest, "invalid_wall", "wall must be active, next, backlog or archived")
	errNoInit      = httpx.E(http.StatusNotFound, "initiative_not_found", "no such initiative")
	errFrontmatter = httpx.E(http.StatusConflict, "frontmatter_malformed", "the initiative's frontmatter is malformed")
	errLevel       = httpx.E(http.StatusBadRequest, "invalid_level", "lvl must be debug, info, warn or error")
	errNoJob       = httpx.E(http.StatusNotFound, "cron_not_found", "no such cron job")
	errOutside     = httpx.E(http.StatusConflict, "path_outside_project", "a file this needs leads outside the project folder")
)

// routes is the daemon's one route table.
func (d *Daemon) routes() {
	h := func(pattern string, f httpx.HandlerFunc) { d.mux.Handle(pattern, httpx.Handle(d.log, f)) }
	h("GET /health", d.health)
	h("GET /state", d.getState)
	h("GET /initiative/walls", d.walls)
	h("POST /initiative/reorder", d.reorder)
	h("GET /debug/tail", d.debugTail)
	h("POST /debug/log", d.debugLog)
	h("GET /crons", d.cronList)
	h("GET /crons/{id}/runs", d.cronRuns)
	h("POST /chat/dispatch", d.dispatch)
	h("GET /chat/snapshot", d.chatSnapshot)
	h("GET /chat/conv/{id}/messages", d.convMessages)
	h("GET /chat/conv/{id}/queue", d.convQueue)
	h("GET /storage", d.storage)
	h("POST /self-update", d.postSelfUpdate)
	h("GET /runs", d.listRuns)
	h("POST /runs", d.createRun)
	h("POST /runs/{id}/cancel", d.cancelRun)
	d.mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		d.events.serve(w, r, d.cfg.AllowedOrigins)
	})
}

func (d *Daemon) health(w http.ResponseWriter, _ *http.Request) error {
	st := d.current()
	paused, until := d.chat.Paused()
	httpx.WriteJSON(w, http.StatusOK, map[string]any{
		"ok": true, "cluster_id": st.cluster.ID, "cluster_name": st.cluster.Name, "endpoint": d.endpoint,
		"version": Version, "device_id": d.cfg.DeviceID, "port_reason": d.reason, "started_at": d.started,
		"standard":           d.standardView(),
		"paused_agent_types": paused, "paused_until": until,
		"features":      map[string]bool{"walls": true, "crons": true, "debug_log": st.cluster.DebugEnabled, "instruction_render": instructions.HasSource(d.cfg.Dir), "chat": d.chat.Enabled()},
		"event_clients": d.events.count(),
	})
	return nil
}

// standardVersion is the integer pinned in the project's standard version
// file, or nil.
func standardVersion(dir string) any {
	b, err := readHead(dir+"/"+StandardVersionFile, 64)
	if err != nil {
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil
	}
	return n
}

// StandardVersionFile pins the project's standard version (an integer).
const StandardVersionFile = ".standard-version"

// stateView is GET /state.
type stateView struct {
	Cluster  any            `json:"cluster"`
	Modules  []moduleView   `json:"modules"`
	Roadmap  map[string]any `json:"roadmap"`
	Docs     []Doc          `json:"docs"`
	Warnings []string       `json:"warnings"`
	BuiltAt  time.Time      `json:"built_at"`
}

// moduleView joins a module of cluster.yaml with its page under
// roadmap/modules, either of which may be missing.
type moduleView struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Path        string `json:"path,omitempty"`
	Description string `json:"description,omitempty"`
	Status      string `json:"status,omitempty"`
	File        string `json:"file,omitempty"`
}

func (d *Daemon) getState(w http.ResponseWriter, _ *http.Request) error {
	st := d.current()
	warns := append(append([]string{}, st.warnings...), d.refusals.list()...)
	httpx.WriteJSON(w, http.StatusOK, stateView{Cluster: st.cluster, Modules: modules(st), Docs: st.docs,
		Roadmap: map[string]any{"initiatives": st.roadmap.Initiatives}, Warnings: warns, BuiltAt: st.builtAt})
	return nil
}

func modules(st *snapshot) []moduleView {
	out := []moduleView{}
	at := map[string]int{}
	for _, m := range st.cluster.Modules {
		at[m.ID] = len(out)
		out = append(out, moduleView{ID: m.ID, Name: m.Name, Path: m.Path, Description: m.Description})
	}
	for _, p := range st.roadmap.Modules {
		i, ok := at[p.ID]
		if !ok {
			i = len(out)
			out = append(out, moduleView{ID: p.ID, Name: p.Title})
		}
		out[i].Status, out[i].File = p.Status, p.File
		if out[i].Name == p.ID {
			out[i].Name = p.Title // a bare id in cluster.yaml: the page names it
		}
	}
	return out
}

func (d *Daemon) walls(w http.ResponseWriter, _ *http.Request) error {
	httpx.WriteJSON(w, http.StatusOK, roadmap.Walls(d.current().roadmap.Initiatives))
	return nil
}

type reorderReq struct {
	ID    string `json:"id"`
	Wall  string `json:"wall"`
	Order *int   `json:"order"`
}

func (d *Daemon) reorder(w http.ResponseWriter, r *http.Request) error {
	body, err := httpx.ReadBody(w, r, maxBody)
	if err != nil {
		return err
	}
	var req reorderReq
	if err := httpx.DecodeJSON(body, &req); err != nil {
		return err
	}
	id := strings.ToLower(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(req.ID), "#")))
	switch {
	case id == "":
		return httpx.ErrInvalid.With("id is required")
	case req.Order == nil || *req.Order < 0:
		return httpx.ErrInvalid.With("order is required: a position from 0")
	}
	order, err := d.applyReorder(id, req.Wall, *req.Order)
	if err != nil {
		return err
	}
	moved := map[string]any{"id": id, "wall": req.Wall, "order": order}
	d.events.publish("initiative.reordered", moved)
	d.debug("info", "walls", "initiative reordered", moved)
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "walls": roadmap.Walls(d.current().roadmap.Initiatives)})
	return nil
}

// applyReorder writes the move on a fresh read of the roadmap and takes the
// result as the new state, so that the next poll does not announce the
// daemon's own writes as a rebuild.
func (d *Daemon) applyReorder(id, wall string, order int) (int, error) {
	d.writeMu.Lock()
	order, err := roadmap.Reorder(roadmap.Load(d.cfg.Dir), d.files, id, wall, order)
	d.writeMu.Unlock()
	switch {
	case errors.Is(err, roadmap.ErrWall):
		return 0, errWall.With("wall %q: want active, next, backlog or archived", wall)
	case errors.Is(err, roadmap.ErrNotFound):
		return 0, errNoInit.With("no initiative %q", id)
	case errors.Is(err, roadmap.ErrFrontmatter):
		return 0, errFrontmatter.With("%v", err)
	case errors.Is(err, atomicfile.ErrOutside):
		return 0, errOutside.With("%v: fix the link first", err)
	case err != nil:
		return 0, err
	}
	_, err = d.rebuild()
	return order, err
}

func (d *Daemon) debugTail(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	secs := 300.0
	if v := q.Get("last_secs"); v != "" {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n < 0 || n > 1e9 {
			return httpx.ErrInvalid.With("last_secs must be a number of seconds from 0")
		}
		secs = n
	}
	minLevel := q.Get("min_level")
	if minLevel == "" {
		minLevel = "debug"
	}
	if !debuglog.ValidLevel(minLevel) {
		return errLevel.With("min_level must be debug, info, warn or error")
	}
	var tags []string
	for _, t := range strings.Split(q.Get("tags"), ",") {
		if t = strings.TrimSpace(t); t != "" {
			tags = append(tags, t)
		}
	}
	since := d.cfg.Clock.Now().Add(-time.Duration(secs * float64(time.Second)))
	events, retained := d.dlog.Tail(debuglog.Query{Since: since, Tags: tags, MinLevel: minLevel})
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"events": events, "retained_secs": retained})
	return nil
}

type debugReq struct {
	TS      json.RawMessage `json:"ts"`
	Src     string          `json:"src"`
	Lvl     string          `json:"lvl"`
	Tag     string          `json:"tag"`
	Msg     string          `json:"msg"`
	Conv    string          `json:"conv"`
	AgentID string          `json:"agent_id"`
	Data    any             `json:"data"`
}

func (d *Daemon) debugLog(w http.ResponseWriter, r *http.Request) error {
	body, err := httpx.ReadBody(w, r, maxBody)
	if err != nil {
		return err
	}
	var req debugReq
	if err := httpx.DecodeJSON(body, &req); err != nil {
		return err
	}
	if req.Lvl == "" {
		req.Lvl = "info"
	}
	if !debuglog.ValidLevel(req.Lvl) {
		return errLevel.With("lvl %q: want debug, info, warn or error", req.Lvl)
	}
	ts, err := parseTS(req.TS)
	if err != nil {
		return err
	}
	if !d.current().cluster.DebugEnabled {
		httpx.WriteJSON(w, http.StatusAccepted, map[string]any{"stored": false, "reason": "debug is disabled in cluster.yaml"})
		return nil
	}
	if req.Src == "" {
		req.Src = "client"
	}
	ev := debuglog.Event{TS: ts, Src: req.Src, Lvl: req.Lvl, Tag: req.Tag, Msg: req.Msg, Conv: req.Conv, AgentID: req.AgentID, Data: req.Data}
	if err := d.dlog.Append(ev); errors.Is(err, atomicfile.ErrOutside) {
		return errOutside.With("the debug log %s leads outside the project folder", debugLogFile)
	} else if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusAccepted, map[string]any{"stored": true})
	return nil
}

// parseTS reads a debug event's ts: RFC 3339 text or Unix seconds; none is
// now (the zero time, which the log stamps).
func parseTS(raw json.RawMessage) (time.Time, error) {
	bad := httpx.ErrInvalid.With("ts must be an RFC 3339 time or Unix seconds")
	if len(raw) == 0 || string(raw) == "null" {
		return time.Time{}, nil
	}
	var secs float64
	if json.Unmarshal(raw, &secs) == nil {
		if secs < 0 || secs > 1e11 {
			return time.Time{}, bad
		}
		return time.Unix(0, int64(secs*1e9)).UTC(), nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return time.Time{}, bad
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, bad
	}
	return t, nil
}

func (d *Daemon) cronList(w http.ResponseWriter, _ *http.Request) error {
	st := d.current()
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"crons_owner": st.cluster.CronsOwner, "device_id": d.cfg.DeviceID,
		"fires": st.cluster.CronsOwner != "" && st.cluster.CronsOwner == d.cfg.DeviceID, "jobs": d.crons.Jobs()})
	return nil
}

func (d *Daemon) cronRuns(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, ok := d.crons.Job(id); !ok {
		return errNoJob.With("no cron job %q", id)
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"job_id": id, "runs": d.crons.Runs(id)})
	return nil
}
