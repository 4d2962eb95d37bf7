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

// keys are the buckets a write from o takes from at the edge: its
// credential's, else its client address's, which for a forwarded request
// is the forwarding node's report, kept apart for each node: a node that
// names another node's client spends only its own buckets. (The node
// budget of a forwarded request is taken where the request arrives.)
func (o Origin) keys() []Key {
	switch {
	case o.Credential != "":
		return []Key{{Credential, o.Credential}}
	case o.Peer != "" && o.Client != "":
		return []Key{{Client, o.Peer + " " + o.Client}}
	case o.Peer != "":
		return nil // a node of an earlier release reports no client: its node budget bounds it
	}
	return []Key{{Client, o.Client}}
}
