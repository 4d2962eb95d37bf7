package wall

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// Client is a wall client: one socket in one cluster, for programs (and
// the mesh chat command) that talk to a node's wall.
type Client struct {
	conn *websocket.Conn
}

// Frame is any frame a client receives (spec 2.2); Kind tells which fields
// are set.
type Frame struct {
	Kind string `json:"kind"`
	// welcome
	You    string  `json:"you,omitempty"`
	YouDID *string `json:"you_did,omitempty"`
	// DIDVerified (welcome, presence): the did's key was proved on connect.
	DIDVerified bool     `json:"did_verified,omitempty"`
	Public      bool     `json:"public,omitempty"`
	Owner       bool     `json:"owner,omitempty"`
	Online      []string `json:"online,omitempty"`
	// More: handles online left out of Online to fit the frame; each
	// follows the welcome as a presence frame.
	More    int    `json:"more,omitempty"`
	Cluster string `json:"cluster,omitempty"`
	Vis     string `json:"vis,omitempty"`
	// presence
	Agent  string  `json:"agent,omitempty"`
	DID    *string `json:"did,omitempty"`
	Status string  `json:"status,omitempty"`
	// message (To is also an ack's: null, a handle or handles)
	From    string          `json:"from,omitempty"`
	FromDID string          `json:"from_did,omitempty"`
	To      json.RawMessage `json:"to,omitempty"`
	TS      int64           `json:"ts,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
	Board   string          `json:"board,omitempty"` // also a board frame's
	Ref     string          `json:"ref,omitempty"`
	// board (Slug also a cluster_updated frame's)
	Event string `json:"event,omitempty"`
	Slug  string `json:"slug,omitempty"`
	// cluster_updated: what changed ("name", "visibility"), the name (nil
	// when this node cannot read it) and the visibility after it.
	Changed    []string `json:"changed,omitempty"`
	Name       *string  `json:"name,omitempty"`
	Visibility string   `json:"visibility,omitempty"`
	Post       string   `json:"post,omitempty"`
	Title      string   `json:"title,omitempty"`
	// ack
	Delivered int `json:"delivered,omitempty"`
	// closed, error
	Reason string `json:"reason,omitempty"`
	Code   string `json:"code,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// DialError is a node's refusal to open a socket, with its JSON error.
type DialError struct {
	Status int
	Code   string
	Detail string
}

func (e *DialError) Error() string {
	return fmt.Sprintf("wall: the node refused the connection: %d %s: %s", e.Status, e.Code, e.Detail)
}

// Dial opens a socket at a wall address (ws://node/v1/clusters/<id>/ws?agent=...).
func Dial(ctx context.Context, url string) (*Client, error) {
	conn, resp, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil {
			var body struct{ Code, Detail string }
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			if json.Unmarshal(b, &body) == nil && body.Detail != "" {
				return nil, &DialError{Status: resp.StatusCode, Code: body.Code, Detail: body.Detail}
			}
		}
		return nil, err
	}
	conn.SetReadLimit(maxMessage)
	return &Client{conn: conn}, nil
}

// Next returns the next frame; after a closed frame the node hangs up and
// Next returns an error.
func (c *Client) Next(ctx context.Context) (Frame, error) {
	_, data, err := c.conn.Read(ctx)
	if err != nil {
		return Frame{}, err
	}
	var f Frame
	if err := json.Unmarshal(data, &f); err != nil {
		return Frame{}, fmt.Errorf("wall: unreadable frame %q: %w", data, err)
	}
	return f, nil
}

// Send sends payload to handles, or to everyone when there are none.
func (c *Client) Send(ctx context.Context, payload any, to ...string) error {
	p, err := marshal(payload)
	if err != nil {
		return err
	}
	v := map[string]any{"payload": json.RawMessage(p)}
	switch len(to) {
	case 0:
	case 1:
		v["to"] = to[0]
	default:
		v["to"] = to
	}
	b, _ := marshal(v)
	return c.conn.Write(ctx, websocket.MessageText, b)
}

// Close says goodbye and closes the socket.
func (c *Client) Close() error { return c.conn.Close(websocket.StatusNormalClosure, "bye") }

// SignedURL returns wall address wsURL (ws://node/v1/clusters/<id or
// slug>/ws?agent=...) with a proof that the socket holds key's did: it
// fetches a challenge from the node wsURL names and adds challenge= and
// sig= (SignConnect), which Dial then presents. Use it right before Dial:
// the challenge lasts 120 s.
func SignedURL(ctx context.Context, wsURL string, key ed25519.PrivateKey) (string, error) {
	u, err := url.Parse(wsURL)
	if err != nil {
		return "", err
	}
	scheme := map[string]string{"ws": "http", "wss": "https"}[u.Scheme]
	if scheme == "" || !strings.HasSuffix(u.Path, "/ws") {
		return "", fmt.Errorf("wall: %q is not a wall address (ws://…/v1/clusters/<id>/ws)", wsURL)
	}
	at := url.URL{Scheme: scheme, Host: u.Host, Path: strings.TrimSuffix(u.Path, "/ws") + "/challenge"}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, at.String(), nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("wall: fetching a challenge: %w", err)
	}
	defer resp.Body.Close()
	var c struct {
		ClusterID string `json:"cluster_id"`
		Challenge string `json:"challenge"`
		Detail    string `json:"detail"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<10)).Decode(&c); err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("wall: fetching a challenge: %s %s", resp.Status, c.Detail)
	}
	q := u.Query()
	q.Set("challenge", c.Challenge)
	q.Set("sig", SignConnect(key, c.ClusterID, q.Get("agent"), c.Challenge, time.Now()))
	u.RawQuery = q.Encode()
	return u.String(), nil
}
