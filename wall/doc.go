// Package wall is the cluster channel: clusters (self-certifying records in
// the canonical log, the public catalog with permanent slugs, deletion),
// the live wall (the WebSocket bridge and its frames, presence, acks,
// visibility modes), its gossipsub transport across nodes, the owner's
// audit history, and their HTTP handlers.
//
// # Clusters are self-certifying
//
// A cluster's admin token (ak_) derives an Ed25519 key; the cluster id
// derives from that key's public half. The cluster record (visibility,
// metadata, a verifier of the member token, boards flag, props) and every
// admin action (delete) are signed by the admin key, so any node checks
// them without ever seeing the admin token. Records and actions travel in
// the canonical log (internal/cmdlog, kind "clusters"), which replicates
// them to every node and in which the directory assigns public slugs. A
// public cluster nobody joins within the directory's join window expires
// (expiry.go).
//
// # The wall crosses nodes on gossipsub
//
// A node subscribes to a cluster's topic while it has at least one local
// socket in it, finds the cluster's other nodes through the rendezvous on
// the bootstrap nodes and asks each for its roster before greeting the
// socket. Messages (numbered, so that each node delivers them in the order
// sent), presence deltas and small periodic beats cross on the topic; full
// rosters, receipts of deliveries and history go on direct streams, so an
// ack counts the sockets that actually received the frame.
// A private cluster's traffic is sealed with a key derived from its member
// token (ck_): a node that relays the topic without the token reads
// nothing.
//
// # Sockets are paced, and cost a bounded amount
//
// A socket over its rate, or its cluster's on this node, is not read
// until the rate allows (TCP slows the client down): a limit delays a
// sender and never drops what it sent. A socket's reader and writer are
// apart, so a paced socket still gets its frames. What waits for slow
// sockets is bounded per socket and for the node, control frames
// included (one pong waits at most), and a socket past either bound, or
// sending control frames too fast, is closed.
//
// It must not import the registryapi package.
package wall
