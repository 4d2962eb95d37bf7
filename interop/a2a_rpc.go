package interop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/agentmesh/mesh/internal/httpx"
)

// The A2A binding: POST / of an agent takes JSON-RPC 2.0 requests of two
// A2A versions side by side, told apart by their method names: A2A 0.3
// (message/send, tasks/get, tasks/cancel) and A2A 1.0 (SendMessage,
// GetTask, CancelTask, ListTasks). A message names a skill and its input;
// the skill runs behind the very handler of POST /v1/<skill> (Mesh-Sig
// check, payment cascade, skill), and its answer becomes the task's
// artifact or status. Both versions share that call, the paywall and the
// task store; only the JSON shapes differ (a2a_v1.go is 1.0's edge).
const (
	// A2AVersion is the A2A protocol version of the card's 0.3 fields
	// (protocolVersion, url, preferredTransport, additionalInterfaces).
	A2AVersion = "0.3.0"
	// A2AVersion03 and A2AVersion1 are the protocol versions the card's
	// supportedInterfaces name, and the values of the A2A-Version header.
	A2AVersion03 = "0.3"
	A2AVersion1  = "1.0"
	// TransportJSONRPC is the A2A transport the agent offers, at its url.
	TransportJSONRPC = "JSONRPC"
	// X402A2AExtension is the A2A extension of x402 payments the binding
	// follows (a2a-x402 v0.2); X402A2AExtensionV01 is its first version's
	// URI, which the agent also declares and activates.
	X402A2AExtension    = "https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2"
	X402A2AExtensionV01 = "https://github.com/google-a2a/a2a-x402/v0.1"
	// HeaderA2AVersion names the A2A version a request speaks (absent: 0.3).
	HeaderA2AVersion = "A2A-Version"
	// HeaderA2AExtensions (1.0) and HeaderA2AExtensionsV03 (0.3) carry the
	// extensions a client activates; the agent answers with those it
	// activated, in the header the client used.
	HeaderA2AExtensions    = "A2A-Extensions"
	HeaderA2AExtensionsV03 = "X-A2A-Extensions"
	// a2aEnvelope is how much larger than MaxBody a JSON-RPC request may
	// be: the message around the skill's input.
	a2aEnvelope = 16 << 10
)

// JSON-RPC 2.0 and A2A error codes.
const (
	rpcParseError          = -32700
	rpcInvalidRequest      = -32600
	rpcMethodNotFound      = -32601
	rpcInvalidParams       = -32602
	rpcTaskNotFound        = -32001
	rpcTaskNotCancelable   = -32002
	rpcPushNotSupported    = -32003
	rpcUnsupported         = -32004
	rpcContentType         = -32005
	rpcNoExtendedCard      = -32007
	rpcVersionNotSupported = -32009
)

// rpcRequest is a decoded JSON-RPC request: ID is a string or a number.
type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// rpcError is a JSON-RPC error object; Data carries this project's
// {detail, code} when there is one (1.0 wraps it in a google.rpc.ErrorInfo).
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message) }

func rpcErr(code int, format string, args ...any) *rpcError {
	return &rpcError{Code: code, Message: fmt.Sprintf(format, args...)}
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// decodeRPC decodes one JSON-RPC 2.0 request (batches are not taken). The
// id is returned whenever it could be read, so that an error names it.
func decodeRPC(body []byte) (rpcRequest, *rpcError) {
	var req rpcRequest
	t := bytes.TrimSpace(body)
	if !json.Valid(t) {
		return req, rpcErr(rpcParseError, "the request is not valid JSON")
	}
	if len(t) == 0 || t[0] != '{' {
		return req, rpcErr(rpcInvalidRequest, "the request must be one JSON-RPC object (batches are not taken)")
	}
	var probe struct {
		ID json.RawMessage `json:"id"`
	}
	json.Unmarshal(t, &probe)
	err := json.Unmarshal(t, &req)
	req.ID = nil
	if validID(probe.ID) {
		req.ID = probe.ID
	}
	switch {
	case err != nil:
		return req, rpcErr(rpcInvalidRequest, "the request is not a JSON-RPC request: %v", err)
	case req.JSONRPC != "2.0":
		return req, rpcErr(rpcInvalidRequest, `jsonrpc must be "2.0"`)
	case req.ID == nil:
		return req, rpcErr(rpcInvalidRequest, "id must be a string or a number")
	case req.Method == "":
		return req, rpcErr(rpcInvalidRequest, "method is required")
	}
	return req, nil
}

// validID: a JSON-RPC id this binding answers, a string or a number.
func validID(id json.RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	switch c := id[0]; {
	case c == '"':
		return true
	case c == '-' || c >= '0' && c <= '9':
		return true
	}
	return false
}

// rpcMethod serves one JSON-RPC method of one A2A version.
type rpcMethod struct {
	version string // A2AVersion03 or A2AVersion1
	serve   func(a *Agent, r *http.Request, params json.RawMessage) (any, *rpcError)
}

// unsupported answers a method the agent knows but does not serve.
func unsupported(version string, code int, format string, args ...any) rpcMethod {
	return rpcMethod{version, func(*Agent, *http.Request, json.RawMessage) (any, *rpcError) {
		return nil, rpcErr(code, format, args...)
	}}
}

// rpcMethods are the methods of both A2A versions, by name.
var rpcMethods = map[string]rpcMethod{
	"message/send": {A2AVersion03, (*Agent).sendV03},
	"tasks/get":    {A2AVersion03, (*Agent).getV03},
	"tasks/cancel": {A2AVersion03, (*Agent).cancelV03},
	"message/stream": unsupported(A2AVersion03, rpcUnsupported,
		"message/stream is not supported: the card declares capabilities.streaming false; use message/send"),
	"tasks/resubscribe":                   unsupported(A2AVersion03, rpcUnsupported, "tasks/resubscribe is not supported: the card declares capabilities.streaming false"),
	"tasks/pushNotificationConfig/set":    unsupported(A2AVersion03, rpcPushNotSupported, "push notifications are not supported"),
	"tasks/pushNotificationConfig/get":    unsupported(A2AVersion03, rpcPushNotSupported, "push notifications are not supported"),
	"tasks/pushNotificationConfig/list":   unsupported(A2AVersion03, rpcPushNotSupported, "push notifications are not supported"),
	"tasks/pushNotificationConfig/delete": unsupported(A2AVersion03, rpcPushNotSupported, "push notifications are not supported"),
	"agent/getAuthenticatedExtendedCard":  unsupported(A2AVersion03, rpcNoExtendedCard, "this agent has no extended card"),

	"SendMessage": {A2AVersion1, (*Agent).sendV1},
	"GetTask":     {A2AVersion1, (*Agent).getV1},
	"CancelTask":  {A2AVersion1, (*Agent).cancelV1},
	"ListTasks":   {A2AVersion1, (*Agent).listV1},
	"SendStreamingMessage": unsupported(A2AVersion1, rpcUnsupported,
		"SendStreamingMessage is not supported: the card declares capabilities.streaming false; use SendMessage"),
	"SubscribeToTask":                  unsupported(A2AVersion1, rpcUnsupported, "SubscribeToTask is not supported: the card declares capabilities.streaming false"),
	"CreateTaskPushNotificationConfig": unsupported(A2AVersion1, rpcPushNotSupported, "push notifications are not supported"),
	"GetTaskPushNotificationConfig":    unsupported(A2AVersion1, rpcPushNotSupported, "push notifications are not supported"),
	"ListTaskPushNotificationConfigs":  unsupported(A2AVersion1, rpcPushNotSupported, "push notifications are not supported"),
	"DeleteTaskPushNotificationConfig": unsupported(A2AVersion1, rpcPushNotSupported, "push notifications are not supported"),
	"GetExtendedAgentCard":             unsupported(A2AVersion1, rpcNoExtendedCard, "this agent has no extended card"),
}

// serveA2A answers a JSON-RPC request at POST /. Every answer is 200 with
// a JSON-RPC response; errors are JSON-RPC errors, in the shape of the
// version the method belongs to.
func (a *Agent) serveA2A(w http.ResponseWriter, r *http.Request) {
	version := A2AVersion03
	reply := func(id json.RawMessage, result any, e *rpcError) {
		if e != nil && version == A2AVersion1 {
			e = errorInfoV1(e)
		}
		httpx.WriteJSON(w, http.StatusOK, rpcResponse{JSONRPC: "2.0", ID: id, Result: result, Error: e})
	}
	body, err := httpx.ReadBody(w, r, a.cfg.MaxBody+a2aEnvelope)
	if err != nil {
		reply(nil, nil, rpcErr(rpcInvalidRequest, "%v", err))
		return
	}
	req, e := decodeRPC(body)
	if e != nil {
		reply(req.ID, nil, e)
		return
	}
	m, ok := rpcMethods[req.Method]
	if !ok {
		reply(req.ID, nil, rpcErr(rpcMethodNotFound, "method %q not found (A2A 1.0: SendMessage, GetTask, CancelTask, ListTasks; A2A 0.3: message/send, tasks/get, tasks/cancel)", req.Method))
		return
	}
	version = m.version
	if v := r.Header.Get(HeaderA2AVersion); v != "" && !knownA2AVersion(v) {
		reply(req.ID, nil, rpcErr(rpcVersionNotSupported, "A2A version %q is not supported: this agent speaks %s and %s", v, A2AVersion1, A2AVersion03))
		return
	}
	a.echoExtensions(w, r)
	result, e := m.serve(a, r, req.Params)
	if e != nil {
		result = nil
	}
	reply(req.ID, result, e)
}

// knownA2AVersion: a version of the A2A-Version header this agent speaks
// (0.3 or 1.0, with or without a patch number).
func knownA2AVersion(v string) bool {
	major, rest, _ := strings.Cut(strings.TrimSpace(v), ".")
	minor, _, _ := strings.Cut(rest, ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	return err1 == nil && err2 == nil && (ma == 0 && mi == 3 || ma == 1 && mi == 0)
}

// echoExtensions activates the extensions a request names in
// A2A-Extensions or X-A2A-Extensions that the agent supports (the x402
// extension, when the agent is paid per call), and says so in the same
// header of the answer.
func (a *Agent) echoExtensions(w http.ResponseWriter, r *http.Request) {
	if a.paywall == nil || !a.paywall.cfg.has(ModeX402) {
		return
	}
	for _, name := range []string{HeaderA2AExtensions, HeaderA2AExtensionsV03} {
		var on []string
		for _, v := range r.Header.Values(name) {
			for _, uri := range strings.Split(v, ",") {
				if uri = strings.TrimSpace(uri); uri == X402A2AExtension || uri == X402A2AExtensionV01 {
					on = append(on, uri)
				}
			}
		}
		if len(on) > 0 {
			w.Header().Set(name, strings.Join(on, ", "))
		}
	}
}

// decodeParams decodes params into v, or answers invalid params.
func decodeParams(params json.RawMessage, v any) *rpcError {
	if len(params) == 0 || params[0] != '{' {
		return rpcErr(rpcInvalidParams, "params must be an object")
	}
	if err := json.Unmarshal(params, v); err != nil {
		return rpcErr(rpcInvalidParams, "params: %v", err)
	}
	return nil
}
