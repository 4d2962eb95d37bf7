// Package wall is the cluster channel. It must not import the registryapi
// package. Its jobs, and the files that do each:
//
//   - Clusters: self-certifying records in the canonical log, the public
//     catalog with permanent slugs, the admin's signed actions (deleting
//     the cluster or patching its props, creating, patching and deleting
//     boards, deleting posts), public clusters nobody joins expiring. cluster.go, catalog.go, expiry.go, handlers.go.
//   - The live wall: WebSocket sockets and their frames, pacing and bounded
//     send queues, presence, acks, visibility modes, a connect's proof of
//     key. ws.go, socket.go, frames.go, messages.go, presence.go, room.go,
//     limits.go, proof.go, challenge.go, config.go, metrics.go.
//   - Across nodes: a cluster's gossipsub topic (messages numbered and
//     delivered in the order sent), other nodes' rosters, receipts of
//     deliveries, who counts as a node of the cluster, sealing of private
//     traffic, browser peers (web pages that join as peers). wire.go,
//     service.go, order.go, roster.go, receipts.go, vouch.go, browser.go.
//   - The owner's history of joins and leaves, kept by the directory.
//     history.go, historyscreen.go.
//   - Boards and posts: signed board actions in the log, their apply and
//     quotas, indexes (time and place), props and the post filter, board
//     events to sockets, expiry. boards*.go, props.go, geo.go.
//
// Besides: what the cluster pages (package wall/pages) read of it
// (public.go), a Go client (client.go) and the errors a client sees
// (errors.go).
//
// # Clusters are self-certifying
//
// A cluster's admin token (ak_) derives an Ed25519 key; the cluster id
// derives from that key's public half. The cluster record (visibility,
// metadata, a verifier of the member token, boards flag, props) and every
// admin action are signed by the admin key, so any node checks them
// without ever seeing the admin token. Records and actions travel in the
// canonical log (internal/cmdlog, kind "clusters"), which replicates them
// to every node and in which the directory assigns public slugs.
//
// # The wall crosses nodes on gossipsub
//
// A node subscribes to a cluster's topic while it has at least one local
// socket in it, finds the cluster's other nodes through the rendezvous on
// the bootstrap nodes and asks each for its roster before greeting the
// socket. Messages, presence deltas and small periodic beats cross on the
// topic; full rosters, receipts of deliveries and history go on direct
// streams, so an ack counts the sockets that actually received the frame.
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
// # One clock
//
// Every time the wall reads is Config.Clock's: its Now stamps and checks
// what carries a time, its timers and tickers run what lasts (Config.Clock
// says which is which), so that tests move it instead of sleeping. A few
// readings are real time whatever the clock says; clock_test.go fails on
// a call of time.Now, Since, Until, After, AfterFunc, NewTimer, NewTicker,
// Tick or Sleep anywhere else in the package:
//
//   - socket.go (writeLoop, hangUp, abort): a connection's write
//     deadlines, which the operating system counts in real time.
//   - socket.go (pace), limits.go (take): the rates, whose token buckets
//     (golang.org/x/time/rate) fill in real time: they pace I/O.
//   - service.go (nextEpoch): a room's epoch, which must grow across
//     restarts of the node, also of one whose clock a test holds still.
//   - client.go (SignedURL): a client signs with its own machine's time.
//
// The deadlines of calls to other nodes (SyncTimeout and the like) are
// real time too: they bound I/O.
package wall
