package interop

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// v1Answer is a decoded JSON-RPC answer of an A2A 1.0 method.
type v1Answer struct {
	raw    string
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    []struct {
			Type     string            `json:"@type"`
			Reason   string            `json:"reason"`
			Domain   string            `json:"domain"`
			Metadata map[string]string `json:"metadata"`
		} `json:"data"`
	} `json:"error"`
}

// v1 calls an A2A 1.0 method with params, as 1.0 clients do (A2A-Version 1.0).
func (h *harness) v1(method string, params any) v1Answer {
	h.t.Helper()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	r := h.call(nil, "POST", "/", string(b), HeaderA2AVersion, "1.0")
	a := v1Answer{raw: r.raw}
	if r.status != 200 || json.Unmarshal([]byte(r.raw), &a) != nil {
		h.t.Fatalf("%s: %d %s", method, r.status, r.raw)
	}
	return a
}

func (a v1Answer) task(t *testing.T) v1Task {
	t.Helper()
	var out struct {
		Task *v1Task `json:"task"`
		v1Task
	}
	if a.Error != nil || json.Unmarshal(a.Result, &out) != nil {
		t.Fatalf("no task: %s", a.raw)
	}
	if out.Task != nil {
		return *out.Task
	}
	return out.v1Task
}

func (a v1Answer) fails(t *testing.T, code int, reason string) {
	t.Helper()
	if a.Error == nil || a.Error.Code != code || reason != "" && (len(a.Error.Data) != 1 || a.Error.Data[0].Reason != reason ||
		a.Error.Data[0].Domain != "a2a-protocol.org" || a.Error.Data[0].Type != "type.googleapis.com/google.rpc.ErrorInfo") {
		t.Fatalf("want error %d %s, got %s", code, reason, a.raw)
	}
}

func v1Send(taskID string, parts ...any) map[string]any {
	m := map[string]any{"messageId": "m1", "role": "ROLE_USER", "parts": parts}
	if taskID != "" {
		m["taskId"] = taskID
	}
	return map[string]any{"message": m}
}

func v1Call(skill, input string) any {
	return map[string]any{"data": map[string]any{"skill": skill, "input": json.RawMessage(input)}}
}

// TestA2AV1Binding: A2A 1.0's JSON-RPC methods, beside 0.3's at the same
// URL, over the same calls and tasks: SendMessage answers
// {"task": <1.0 Task>}, GetTask and CancelTask a Task, ListTasks the tasks
// of one context, and errors carry 1.0's google.rpc.ErrorInfo. Every
// result validates against A2A 1.0's schema.
func TestA2AV1Binding(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	send := schemaDef(t, "testdata/a2a/a2a-v1.schema.json", "Send Message Response")
	task := schemaDef(t, "testdata/a2a/a2a-v1.schema.json", "Task")
	list := schemaDef(t, "testdata/a2a/a2a-v1.schema.json", "List Tasks Response")

	free := h.v1("SendMessage", v1Send("", v1Call("ping", `{}`)))
	validate(t, send, "SendMessage's result", string(free.Result))
	ft := free.task(t)
	if ft.Status.State != "TASK_STATE_COMPLETED" || len(ft.Artifacts) != 1 || *ft.Artifacts[0].Parts[0].Text != `"pong"` ||
		ft.Status.Message.Role != "ROLE_AGENT" || ft.ContextID == "" {
		t.Fatalf("free call: %s", free.raw)
	}
	// The same task through 0.3's tasks/get and 1.0's GetTask.
	if a := h.rpc(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"` + ft.ID + `"}}`); a.Result == nil || a.Result.Status.State != "completed" {
		t.Fatalf("tasks/get of a 1.0 task: %s", a.raw)
	}
	got := h.v1("GetTask", map[string]any{"id": ft.ID, "historyLength": 0})
	validate(t, task, "GetTask's result", string(got.Result))
	if gt := got.task(t); gt.ID != ft.ID || gt.Status.State != "TASK_STATE_COMPLETED" {
		t.Fatalf("GetTask: %s", got.raw)
	}
	h.v1("CancelTask", map[string]any{"id": ft.ID}).fails(t, rpcTaskNotCancelable, "TASK_NOT_CANCELABLE")

	// A paid call awaits payment in the free call's context (listed first:
	// the most recently changed); it is canceled.
	h.clock.Advance(time.Second)
	msg := v1Send("", v1Call("echo", `{"x":1}`))
	msg["message"].(map[string]any)["contextId"] = ft.ContextID
	paid := h.v1("SendMessage", msg)
	validate(t, send, "a paid call's result", string(paid.Result))
	pt := paid.task(t)
	if pt.Status.State != "TASK_STATE_INPUT_REQUIRED" || pt.ContextID != ft.ContextID || pt.Status.Message.Metadata[MetaPaymentRequired] == nil {
		t.Fatalf("paid call: %s", paid.raw)
	}
	listed := h.v1("ListTasks", map[string]any{"contextId": ft.ContextID, "includeArtifacts": true})
	validate(t, list, "ListTasks' result", string(listed.Result))
	var l struct {
		Tasks         []v1Task `json:"tasks"`
		NextPageToken *string  `json:"nextPageToken"`
		TotalSize     int      `json:"totalSize"`
	}
	json.Unmarshal(listed.Result, &l)
	if len(l.Tasks) != 2 || l.TotalSize != 2 || l.NextPageToken == nil || *l.NextPageToken != "" || len(l.Tasks[1].Artifacts) != 1 {
		t.Fatalf("ListTasks: %s", listed.raw)
	}
	canceled := h.v1("CancelTask", map[string]any{"id": pt.ID})
	validate(t, task, "CancelTask's result", string(canceled.Result))
	if canceled.task(t).Status.State != "TASK_STATE_CANCELED" {
		t.Fatalf("CancelTask: %s", canceled.raw)
	}
	page := h.v1("ListTasks", map[string]any{"contextId": ft.ContextID, "pageSize": 1, "status": "TASK_STATE_CANCELED"})
	json.Unmarshal(page.Result, &l)
	if len(l.Tasks) != 1 || l.Tasks[0].ID != pt.ID || l.TotalSize != 1 || len(l.Tasks[0].Artifacts) != 0 {
		t.Fatalf("ListTasks of canceled tasks: %s", page.raw)
	}
	if two := h.v1("ListTasks", map[string]any{"contextId": ft.ContextID, "pageSize": 1}); !strings.Contains(two.raw, `"nextPageToken":"1"`) {
		t.Fatalf("ListTasks' first page of two: %s", two.raw)
	}

	// Errors, in 1.0's shape.
	h.v1("SendMessage", v1Send(pt.ID, map[string]any{"text": "more"})).fails(t, rpcUnsupported, "UNSUPPORTED_OPERATION")
	h.v1("GetTask", map[string]any{"id": "task_nope"}).fails(t, rpcTaskNotFound, "TASK_NOT_FOUND")
	h.v1("SendStreamingMessage", v1Send("", v1Call("ping", `{}`))).fails(t, rpcUnsupported, "UNSUPPORTED_OPERATION")
	h.v1("SubscribeToTask", map[string]any{"id": ft.ID}).fails(t, rpcUnsupported, "UNSUPPORTED_OPERATION")
	h.v1("CreateTaskPushNotificationConfig", map[string]any{}).fails(t, rpcPushNotSupported, "PUSH_NOTIFICATION_NOT_SUPPORTED")
	h.v1("GetExtendedAgentCard", map[string]any{}).fails(t, rpcNoExtendedCard, "EXTENDED_AGENT_CARD_NOT_CONFIGURED")
	h.v1("ListTasks", map[string]any{}).fails(t, rpcInvalidParams, "INVALID_PARAMS")
	h.v1("ListTasks", map[string]any{"contextId": "c", "pageSize": 101}).fails(t, rpcInvalidParams, "INVALID_PARAMS")
	h.v1("SendMessage", v1Send("", map[string]any{"url": "https://x.example/f"})).fails(t, rpcContentType, "CONTENT_TYPE_NOT_SUPPORTED")
	h.v1("SendMessage", v1Send("", map[string]any{"mediaType": "text/plain"})).fails(t, rpcInvalidParams, "INVALID_PARAMS")
	unknown := h.v1("SendMessage", v1Send("", v1Call("nope", `1`)))
	unknown.fails(t, rpcInvalidParams, "INVALID_PARAMS")
	if md := unknown.Error.Data[0].Metadata; md["code"] != "unknown_skill" {
		t.Fatalf("unknown skill: %s", unknown.raw)
	}
	for _, role := range []any{"ROLE_AGENT", 2, "user"} {
		m := v1Send("", v1Call("ping", `{}`))
		m["message"].(map[string]any)["role"] = role
		h.v1("SendMessage", m).fails(t, rpcInvalidParams, "INVALID_PARAMS")
	}
	m := v1Send("", v1Call("ping", `{}`))
	m["message"].(map[string]any)["role"] = 1 // ProtoJSON takes an enum's number
	if h.v1("SendMessage", m).task(t).Status.State != "TASK_STATE_COMPLETED" {
		t.Fatal("role 1 (ROLE_USER) refused")
	}
	for _, v := range []string{"2.0", "0.2", "one"} {
		b := `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"` + ft.ID + `"}}`
		r := h.call(nil, "POST", "/", b, HeaderA2AVersion, v)
		if !strings.Contains(r.raw, fmt.Sprint(rpcVersionNotSupported)) || !strings.Contains(r.raw, "VERSION_NOT_SUPPORTED") {
			t.Fatalf("A2A-Version %s: %s", v, r.raw)
		}
	}
}
