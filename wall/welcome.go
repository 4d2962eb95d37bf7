package wall

// greetingLocked is what socket sk gets first on entering the room: its
// welcome frame, listing the handles online on every node (spec 2.2).
// A welcome is a frame like any other, at most MaxFrame bytes; in a room
// whose handles do not all fit (some 1,000 handles of 64 bytes), it lists
// as many as fit, in order, says in More how many it left out, and each
// of those follows it as a presence frame (status online), as if it had
// just come online: a client that reads the welcome, then presence, as
// the spec says, holds the whole room. They are queued as one frame, so
// that a large room does not fill the socket's send queue at once.
func (r *room) greetingLocked(sk *socket) outFrame {
	members := r.membersLocked()
	w := welcomeFrame{Kind: KindWelcome, You: sk.handle, YouDID: nullable(sk.did), Verified: sk.proof != "",
		Public: r.cl.Public(), Owner: sk.owner, Online: make([]string, 0, len(members)), Cluster: r.cl.ID, Vis: sk.vis}
	for _, m := range members {
		w.Online = append(w.Online, m.Agent)
	}
	data := encodeFrame(w)
	if len(data) <= MaxFrame {
		return text(data)
	}
	fit := welcomeFit(w)
	w.Online, w.More = w.Online[:fit], len(members)-fit
	out := text(encodeFrame(w))
	for _, m := range members[fit:] {
		out.f.more = append(out.f.more, encodeFrame(presenceFrame{Kind: KindPresence, Agent: m.Agent, DID: nullable(m.DID), Verified: m.verified(), Status: "online"}))
	}
	return out
}

// welcomeFit is how many of w's handles, from the first, fit in a welcome
// of at most MaxFrame bytes that says how many it left out.
func welcomeFit(w welcomeFrame) int {
	handles := w.Online
	w.Online, w.More = []string{}, len(handles) // as many digits as any count left out
	size := len(encodeFrame(w))
	for i, h := range handles {
		size += len(encodeFrame(h))
		if i > 0 {
			size++ // the comma
		}
		if size > MaxFrame {
			return i
		}
	}
	return len(handles)
}
