package interop

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// A2A 1.0's edge: its JSON-RPC methods take and answer the ProtoJSON
// shapes of lf.a2a.v1 (no kind discriminators, SCREAMING_SNAKE_CASE enums,
// a part is one of text, raw, url or data), converted here to and from the
// core types the 0.3 binding speaks as they are.

// protoEnum is a ProtoJSON enum value: its name, or its number as text.
type protoEnum string

func (e *protoEnum) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*e = protoEnum(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	*e = protoEnum(n.String())
	return nil
}

type v1Part struct {
	Text      *string                    `json:"text,omitempty"`
	Raw       *string                    `json:"raw,omitempty"`
	URL       *string                    `json:"url,omitempty"`
	Data      json.RawMessage            `json:"data,omitempty"`
	MediaType string                     `json:"mediaType,omitempty"`
	Filename  string                     `json:"filename,omitempty"`
	Metadata  map[string]json.RawMessage `json:"metadata,omitempty"`
}

type v1Message struct {
	MessageID string                     `json:"messageId"`
	ContextID string                     `json:"contextId,omitempty"`
	TaskID    string                     `json:"taskId,omitempty"`
	Role      protoEnum                  `json:"role"`
	Parts     []v1Part                   `json:"parts"`
	Metadata  map[string]json.RawMessage `json:"metadata,omitempty"`
}

type v1Task struct {
	ID        string       `json:"id"`
	ContextID string       `json:"contextId"`
	Status    v1Status     `json:"status"`
	Artifacts []v1Artifact `json:"artifacts,omitempty"`
}

type v1Status struct {
	State     string     `json:"state"`
	Message   *v1Message `json:"message,omitempty"`
	Timestamp string     `json:"timestamp,omitempty"`
}

type v1Artifact struct {
	ArtifactID string   `json:"artifactId"`
	Name       string   `json:"name,omitempty"`
	Parts      []v1Part `json:"parts"`
}

func (a *Agent) sendV1(r *http.Request, params json.RawMessage) (any, *rpcError) {
	var p struct {
		Message *v1Message `json:"message"`
	}
	if e := decodeParams(params, &p); e != nil {
		return nil, e
	}
	var m *a2aMessage
	if p.Message != nil {
		var e *rpcError
		if m, e = p.Message.core(); e != nil {
			return nil, e
		}
	}
	t, e := a.sendMessage(r, m)
	return map[string]v1Task{"task": taskV1(t, true)}, e
}

func (a *Agent) getV1(_ *http.Request, params json.RawMessage) (any, *rpcError) {
	id, e := taskIDParam(params)
	if e != nil {
		return nil, e
	}
	t, e := a.getTask(id)
	return taskV1(t, true), e
}

func (a *Agent) cancelV1(_ *http.Request, params json.RawMessage) (any, *rpcError) {
	id, e := taskIDParam(params)
	if e != nil {
		return nil, e
	}
	t, e := a.tasks.cancel(id, a.now())
	return taskV1(t, true), e
}

// Bounds of ListTasks pages.
const (
	defaultListPage = 50
	maxListPage     = 100
)

// listV1 serves ListTasks for one context: a task is visible to whoever
// holds its id or its context id (clients are not authenticated), so the
// tasks of one context are listed and no others.
func (a *Agent) listV1(_ *http.Request, params json.RawMessage) (any, *rpcError) {
	var p struct {
		ContextID            string      `json:"contextId"`
		Status               protoEnum   `json:"status"`
		PageSize             json.Number `json:"pageSize"`
		PageToken            string      `json:"pageToken"`
		StatusTimestampAfter string      `json:"statusTimestampAfter"`
		IncludeArtifacts     bool        `json:"includeArtifacts"`
	}
	if e := decodeParams(params, &p); e != nil {
		return nil, e
	}
	if p.ContextID == "" {
		return nil, rpcErr(rpcInvalidParams, "params.contextId is required: this agent lists the tasks of one context, which its tasks name")
	}
	size, offset := defaultListPage, 0
	if p.PageSize != "" {
		n, err := strconv.Atoi(p.PageSize.String())
		if err != nil || n < 1 || n > maxListPage {
			return nil, rpcErr(rpcInvalidParams, "params.pageSize must be 1 to %d", maxListPage)
		}
		size = n
	}
	if p.PageToken != "" {
		n, err := strconv.Atoi(p.PageToken)
		if err != nil || n < 0 {
			return nil, rpcErr(rpcInvalidParams, "params.pageToken is not a page token of this agent")
		}
		offset = n
	}
	var after time.Time
	if p.StatusTimestampAfter != "" {
		var err error
		if after, err = time.Parse(time.RFC3339, p.StatusTimestampAfter); err != nil {
			return nil, rpcErr(rpcInvalidParams, "params.statusTimestampAfter must be an RFC 3339 time")
		}
	}
	state := stateOfV1(string(p.Status))
	tasks := a.tasks.inContext(p.ContextID, func(t a2aTask, updated time.Time) bool {
		return (state == "" || t.Status.State == state) && !updated.Before(after)
	})
	page := tasks[min(offset, len(tasks)):min(offset+size, len(tasks))]
	out := struct {
		Tasks         []v1Task `json:"tasks"`
		NextPageToken string   `json:"nextPageToken"`
		PageSize      int      `json:"pageSize"`
		TotalSize     int      `json:"totalSize"`
	}{Tasks: make([]v1Task, len(page)), PageSize: size, TotalSize: len(tasks)}
	for i, t := range page {
		out.Tasks[i] = taskV1(t, p.IncludeArtifacts)
	}
	if offset+size < len(tasks) {
		out.NextPageToken = strconv.Itoa(offset + size)
	}
	return out, nil
}

// core is a 1.0 message as the core type.
func (m *v1Message) core() (*a2aMessage, *rpcError) {
	out := &a2aMessage{Kind: "message", MessageID: m.MessageID, ContextID: m.ContextID, TaskID: m.TaskID, Metadata: m.Metadata}
	switch m.Role {
	case "ROLE_USER", "1":
		out.Role = "user"
	case "ROLE_AGENT", "2":
		out.Role = "agent"
	}
	for _, p := range m.Parts {
		switch {
		case p.Text != nil:
			out.Parts = append(out.Parts, a2aPart{Kind: "text", Text: p.Text})
		case p.Data != nil:
			out.Parts = append(out.Parts, a2aPart{Kind: "data", Data: p.Data})
		case p.URL != nil || p.Raw != nil:
			out.Parts = append(out.Parts, a2aPart{Kind: "file"})
		default:
			return nil, rpcErr(rpcInvalidParams, "a part needs one of text, data, url or raw")
		}
	}
	return out, nil
}

// taskV1 is a task in 1.0's shape, with its artifacts or without.
func taskV1(t a2aTask, artifacts bool) v1Task {
	out := v1Task{ID: t.ID, ContextID: t.ContextID, Status: v1Status{State: stateV1(t.Status.State), Timestamp: t.Status.Timestamp}}
	if m := t.Status.Message; m != nil {
		out.Status.Message = &v1Message{MessageID: m.MessageID, ContextID: m.ContextID, TaskID: m.TaskID,
			Role: protoEnum("ROLE_" + strings.ToUpper(m.Role)), Parts: partsV1(m.Parts), Metadata: m.Metadata}
	}
	if artifacts {
		for _, art := range t.Artifacts {
			out.Artifacts = append(out.Artifacts, v1Artifact{ArtifactID: art.ArtifactID, Name: art.Name, Parts: partsV1(art.Parts)})
		}
	}
	return out
}

func partsV1(parts []a2aPart) []v1Part {
	out := make([]v1Part, len(parts))
	for i, p := range parts {
		if p.Kind == "data" {
			out[i] = v1Part{Data: p.Data, MediaType: "application/json"}
		} else {
			out[i] = v1Part{Text: p.Text}
		}
	}
	return out
}

// stateV1 is 1.0's name of a task state: input-required is
// TASK_STATE_INPUT_REQUIRED; stateOfV1 is the reverse ("" for none).
func stateV1(s string) string {
	return "TASK_STATE_" + strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
}

func stateOfV1(s string) string {
	if n, err := strconv.Atoi(s); err == nil {
		names := []string{"", "submitted", "working", stateCompleted, stateFailed, stateCanceled, stateInputRequired, stateRejected, "auth-required"}
		if n > 0 && n < len(names) {
			return names[n]
		}
		return ""
	}
	s, _ = strings.CutPrefix(s, "TASK_STATE_")
	if s == "UNSPECIFIED" {
		return ""
	}
	return strings.ToLower(strings.ReplaceAll(s, "_", "-"))
}

// errorReasonsV1 are the google.rpc.ErrorInfo reasons of A2A 1.0's errors.
var errorReasonsV1 = map[int]string{
	rpcInvalidParams:       "INVALID_PARAMS",
	rpcTaskNotFound:        "TASK_NOT_FOUND",
	rpcTaskNotCancelable:   "TASK_NOT_CANCELABLE",
	rpcPushNotSupported:    "PUSH_NOTIFICATION_NOT_SUPPORTED",
	rpcUnsupported:         "UNSUPPORTED_OPERATION",
	rpcContentType:         "CONTENT_TYPE_NOT_SUPPORTED",
	rpcNoExtendedCard:      "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
	rpcVersionNotSupported: "VERSION_NOT_SUPPORTED",
}

// errorInfoV1 is an error in 1.0's shape: its data a list holding a
// google.rpc.ErrorInfo, whose metadata is this project's {detail, code}.
func errorInfoV1(e *rpcError) *rpcError {
	reason, ok := errorReasonsV1[e.Code]
	if !ok {
		return e
	}
	info := map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "a2a-protocol.org"}
	if md, ok := e.Data.(map[string]string); ok {
		info["metadata"] = md
	}
	return &rpcError{Code: e.Code, Message: e.Message, Data: []any{info}}
}

// cardV1 is the agent's card in A2A 1.0's shape, which takes no field
// 1.0 does not define: served to a client that asks for A2A-Version 1.0.
type cardV1 struct {
	Name                string             `json:"name"`
	Description         string             `json:"description"`
	SupportedInterfaces []AgentInterfaceV1 `json:"supportedInterfaces"`
	Version             string             `json:"version"`
	Capabilities        capabilitiesV1     `json:"capabilities"`
	DefaultInputModes   []string           `json:"defaultInputModes"`
	DefaultOutputModes  []string           `json:"defaultOutputModes"`
	Skills              []skillV1          `json:"skills"`
}

type capabilitiesV1 struct {
	Streaming         bool           `json:"streaming"`
	PushNotifications bool           `json:"pushNotifications"`
	Extensions        []A2AExtension `json:"extensions,omitempty"`
}

type skillV1 struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Tags        []string `json:"tags"`
	Examples    []string `json:"examples,omitempty"`
}

// toV1 is the card's A2A 1.0 form.
func (c *Card) toV1() cardV1 {
	out := cardV1{Name: c.Name, Description: c.Description, SupportedInterfaces: c.SupportedInterfaces, Version: c.Version,
		Capabilities:      capabilitiesV1{Streaming: c.Capabilities.Streaming, PushNotifications: c.Capabilities.PushNotifications, Extensions: c.Capabilities.Extensions},
		DefaultInputModes: c.DefaultInputModes, DefaultOutputModes: c.DefaultOutputModes, Skills: make([]skillV1, len(c.Skills))}
	for i, s := range c.Skills {
		out.Skills[i] = skillV1{ID: s.ID, Name: s.Name, Description: s.Description, Tags: s.Tags, Examples: s.Examples}
	}
	return out
}

// wantsV1 reports whether an A2A-Version header asks for 1.0 or later.
func wantsV1(v string) bool {
	major, _, _ := strings.Cut(strings.TrimSpace(v), ".")
	n, err := strconv.Atoi(major)
	return err == nil && n >= 1
}
