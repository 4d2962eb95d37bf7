package interop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/agentmesh/mesh/internal/httpx"
)

// The A2A binding (A2A 0.3.0, JSON-RPC transport): POST / of an agent
// takes JSON-RPC 2.0 requests message/send, tasks/get and tasks/cancel. A
// message names a skill and its input; the skill runs behind the very
// handler of POST /v1/<skill> (Mesh-Sig check, payment cascade, skill), and
// its answer becomes the task's artifact or status.
const (
	// A2AVersion is the A2A protocol version the card and binding follow.
	A2AVersion = "0.3.0"
	// TransportJSONRPC is the A2A transport the agent offers, at its url.
	TransportJSONRPC = "JSONRPC"
	// X402A2AExtension is the A2A extension of x402 payments the binding
	// follows (x402's A2A transport).
	X402A2AExtension = "https://github.com/google-a2a/a2a-x402/v0.1"
	// a2aEnvelope is how much larger than MaxBody a JSON-RPC request may
	// be: the message around the skill's input.
	a2aEnvelope = 16 << 10
)

// JSON-RPC 2.0 and A2A error codes.
const (
	rpcParseError        = -32700
	rpcInvalidRequest    = -32600
	rpcMethodNotFound    = -32601
	rpcInvalidParams     = -32602
	rpcTaskNotFound      = -32001
	rpcTaskNotCancelable = -32002
	rpcPushNotSupported  = -32003
	rpcUnsupported       = -32004
	rpcContentType       = -32005
	rpcNoExtendedCard    = -32007
)

// rpcRequest is a decoded JSON-RPC request: ID is a string or a number.
type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// rpcError is a JSON-RPC error object; Data carries this project's
// {detail, code} when there is one.
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

// serveA2A answers a JSON-RPC request at POST /. Every answer is 200 with
// a JSON-RPC response; errors are JSON-RPC errors.
func (a *Agent) serveA2A(w http.ResponseWriter, r *http.Request) {
	reply := func(id json.RawMessage, result any, e *rpcError) {
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
	var result any
	switch req.Method {
	case "message/send":
		result, e = a.a2aSend(r, req.Params)
	case "tasks/get":
		result, e = a.a2aGet(req.Params)
	case "tasks/cancel":
		result, e = a.a2aCancel(req.Params)
	case "message/stream", "tasks/resubscribe":
		e = rpcErr(rpcUnsupported, "%s is not supported: the card declares capabilities.streaming false; use message/send", req.Method)
	case "tasks/pushNotificationConfig/set", "tasks/pushNotificationConfig/get",
		"tasks/pushNotificationConfig/list", "tasks/pushNotificationConfig/delete":
		e = rpcErr(rpcPushNotSupported, "push notifications are not supported")
	case "agent/getAuthenticatedExtendedCard":
		e = rpcErr(rpcNoExtendedCard, "this agent has no extended card")
	default:
		e = rpcErr(rpcMethodNotFound, "method %q not found", req.Method)
	}
	if e != nil {
		reply(req.ID, nil, e)
		return
	}
	reply(req.ID, result, nil)
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
