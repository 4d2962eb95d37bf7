package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentmesh/mesh/wall"
)

// StreamOptions configures Stream: a sender streams deltas in the spec's
// convention (spec 2.3) at Rate a second for Duration, or, with Rate 0,
// Burst of them at once.
type StreamOptions struct {
	Burst    int
	Rate     int
	Duration time.Duration
}

// StreamResult is what Stream measured: deltas the reader got of those
// sent (and whether in order), error frames the sender got, and the delay
// of each ack after its delta was due to be sent (so it includes any
// pacing of the sender).
type StreamResult struct {
	Sent, Delivered, Errors int
	InOrder                 bool // the reader got them in the order sent
	Done                    bool // the reader got the last delta, done: true
	AckDelay                Percentiles
	Elapsed                 time.Duration
}

func (r StreamResult) String() string {
	return fmt.Sprintf("%d of %d deltas delivered (in order %v, done %v), %d error frames, in %.1fs; sender's ack delay %s",
		r.Delivered, r.Sent, r.InOrder, r.Done, r.Errors, r.Elapsed.Seconds(), r.AckDelay)
}

type streamDelta struct {
	Type   string `json:"type"`
	Stream string `json:"stream"`
	Seq    int    `json:"seq"`
	Delta  string `json:"delta"`
	Done   bool   `json:"done,omitempty"`
	Sent   int64  `json:"sent"` // when it was due, Unix ns
}

// Stream measures a streamed answer on the nodes at bases under their own
// limits: the sender on the first, a reader on the last (one base puts
// both on one node).
func Stream(ctx context.Context, bases []string, o StreamOptions) (StreamResult, error) {
	cl, err := CreateCluster(ctx, bases[0])
	if err != nil {
		return StreamResult{}, err
	}
	defer cl.Delete()
	rx, err := wall.Dial(ctx, WSURL(bases[len(bases)-1], cl.ID, "reader", nil))
	if err != nil {
		return StreamResult{}, err
	}
	defer rx.Close()
	if _, err := rx.Next(ctx); err != nil {
		return StreamResult{}, err
	}
	tx, err := wall.Dial(ctx, WSURL(bases[0], cl.ID, "streamer", nil))
	if err != nil {
		return StreamResult{}, err
	}
	defer tx.Close()
	if _, err := tx.Next(ctx); err != nil {
		return StreamResult{}, err
	}
	n, every := o.Burst, time.Duration(0)
	if o.Rate > 0 {
		n, every = int(o.Duration.Seconds()*float64(o.Rate)), time.Second/time.Duration(o.Rate)
	}
	if n < 1 {
		return StreamResult{}, fmt.Errorf("bench: nothing to stream")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(n)*every+time.Minute)
	defer cancel()
	start := time.Now()
	due := func(i int) time.Time { return start.Add(time.Duration(i) * every) }

	rctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	read := make(chan StreamResult, 1)
	go func() {
		r := StreamResult{InOrder: true}
		defer func() { read <- r }()
		for last := -1; !r.Done; {
			f, err := rx.Next(rctx)
			if err != nil {
				return
			}
			var d streamDelta
			if f.Kind != wall.KindMessage || json.Unmarshal(f.Payload, &d) != nil {
				continue
			}
			r.Delivered++
			r.InOrder = r.InOrder && d.Seq > last
			last, r.Done = d.Seq, d.Done
		}
	}()
	answers := make(chan StreamResult, 1)
	go func() {
		var r StreamResult
		var delays []time.Duration
		defer func() { r.AckDelay = percentiles(delays); answers <- r }()
		for len(delays)+r.Errors < n {
			f, err := tx.Next(ctx)
			if err != nil {
				return
			}
			switch f.Kind {
			case wall.KindAck:
				delays = append(delays, time.Since(due(len(delays)+r.Errors)))
			case wall.KindError:
				r.Errors++
			}
		}
	}()
	for i := range n {
		time.Sleep(time.Until(due(i)))
		d := streamDelta{Type: "message", Stream: "s1", Seq: i, Delta: "token ", Done: i == n-1, Sent: due(i).UnixNano()}
		if err := tx.Send(ctx, d); err != nil {
			return StreamResult{}, err
		}
	}
	a := <-answers
	// Every delta is answered; the last may still be on its way (or lost).
	wait := time.AfterFunc(2*time.Second, stopReading)
	defer wait.Stop()
	r := <-read
	r.Sent, r.Errors, r.AckDelay, r.Elapsed = n, a.Errors, a.AckDelay, time.Since(start)
	return r, nil
}
