package admission

import "context"

// Origin is where a write comes from, as admission sees it. Writes puts
// it in the request's context for the handlers further in.
type Origin struct {
	// Surface names the write (register, feedback, cluster_create...).
	Surface string
	// Client is the client's address (httpx.AddrKey); for a request
	// another node forwarded, the address that node reports ("" when it
	// reports none).
	Client string
	// Peer is the node that forwarded the request to this one; "" for a
	// request that came to this node directly.
	Peer string
	// Credential names the request's established credential, if any.
	Credential string
}

type originKey struct{}

// WithOrigin records o in ctx. The directory records the forwarding node
// and the client it reports before a forwarded request is served.
func WithOrigin(ctx context.Context, o Origin) context.Context {
	return context.WithValue(ctx, originKey{}, o)
}

// OriginOf returns the origin recorded in ctx.
func OriginOf(ctx context.Context) (Origin, bool) {
	o, ok := ctx.Value(originKey{}).(Origin)
	return o, ok
}

// keys are the buckets a write from o takes from where it arrives: its
// credential's, else its client address's, which for a forwarded request
// is the forwarding node's report, kept apart for each node: a node that
// names another node's client spends only its own buckets. On the
// directory, a write of its own clients also takes from its own node
// budget, as a forwarded one takes from the forwarding node's (where the
// stream arrives): the directory's clients are one node's share too.
func (a *Admitter) keys(o Origin) []Key {
	var keys []Key
	switch {
	case o.Credential != "":
		keys = append(keys, Key{Credential, o.Credential})
	case o.Peer != "" && o.Client != "":
		keys = append(keys, Key{Client, o.Peer + " " + o.Client})
	case o.Peer != "":
		// A node of an earlier release reports no client: its node budget bounds it.
	default:
		keys = append(keys, Key{Client, o.Client})
	}
	if o.Peer == "" && a.self != "" {
		keys = append(keys, Key{Node, a.self})
	}
	return keys
}
