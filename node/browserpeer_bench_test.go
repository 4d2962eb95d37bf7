package node

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Benchmarks of browser peers, in chromium, per transport:
//
//	go test ./node -run '^$' -bench BrowserPeer -benchtime 5x

var benchTransports = []string{"webtransport", "webrtc-direct"}

// msOf reads a page's figure (a data attribute, in ms).
func msOf(p *pageTab, expr string) float64 {
	v, err := strconv.ParseFloat(p.eval(expr), 64)
	if err != nil {
		p.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// BenchmarkBrowserPeerJoin: from a page's load to its first message
// delivered, the page on a node of a mesh of three and a WebSocket member
// on another: ms from the page's navigation to its first message's ack
// (every node's receipt: the member had it), the test's typing and
// clicking included, and its parts: joining (from the click: the bundle's
// load, the keys, the challenge, the dials, the roster exchanges) and the
// first message's ack (from the send).
func BenchmarkBrowserPeerJoin(b *testing.B) {
	for _, transport := range benchTransports {
		b.Run(transport, func(b *testing.B) {
			pm := newPeerMesh(b)
			alice := enterWall(b, pm.m.boot, pm.id, q("agent", "alice"))
			var total, join, ack float64
			n := 0
			for b.Loop() {
				p := openPage(b, pm.n1.URL()+"/clusters/"+pm.id+"?transport="+transport)
				p.join(fmt.Sprintf("page-%d", n))
				p.say("first")
				if f := nextMessage(alice); f["payload"] != "first" {
					b.Fatalf("alice got %v", f)
				}
				total += msOf(p, `document.querySelector("#send-status").dataset.ackAt`)
				join += msOf(p, `document.querySelector("#joined").dataset.joinMs`)
				ack += msOf(p, `document.querySelector("#send-status").dataset.ackMs`)
				p.close()
				n++
			}
			b.ReportMetric(total/float64(n), "ms-load-to-ack")
			b.ReportMetric(join/float64(n), "ms-join")
			b.ReportMetric(ack/float64(n), "ms-first-ack")
		})
	}
}

// BenchmarkBrowserPeerMessages: how many messages a second a page gets to
// a WebSocket member on another node when its visitor sends a burst of
// 400 (a page's burst: it paces itself to 200 a second past that, as a
// node paces a socket) from its send form, each shown on the page as
// sent; the page's bucket refills between bursts, out of the figure.
func BenchmarkBrowserPeerMessages(b *testing.B) {
	const burst = 400
	for _, transport := range benchTransports {
		b.Run(transport, func(b *testing.B) {
			pm := newPeerMesh(b)
			alice := enterWall(b, pm.m.boot, pm.id, q("agent", "alice"))
			p := openPage(b, pm.n1.URL()+"/clusters/"+pm.id+"?transport="+transport)
			p.join("sender")
			var secs float64
			for b.Loop() {
				time.Sleep(2 * time.Second) // the page's bucket refills
				start := time.Now()
				if err := chromedp.Do(p.ctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
					const form = document.querySelector("#send-form"), input = document.querySelector("#send-text");
					for (let i = 0; i < %d; i++) { input.value = "m" + i; form.requestSubmit(); }
				})()`, burst))); err != nil {
					b.Fatal(err)
				}
				for range burst {
					nextMessage(alice)
				}
				secs += time.Since(start).Seconds()
			}
			b.ReportMetric(float64(burst*b.N)/secs, "msgs/s")
		})
	}
}

// BenchmarkBrowserPeerMemory: what a node holds per browser peer joined to
// one of its clusters (heap and stacks in use after a collection, in this
// process, which runs the node alone: the pages are chromium's), 8 pages
// at a time. The test's own state per tab (chromedp's) is in the figure.
func BenchmarkBrowserPeerMemory(b *testing.B) {
	const pages = 8
	for _, transport := range benchTransports {
		b.Run(transport, func(b *testing.B) {
			m := newMeshWith(b, withBrowsers)
			id := createCluster(b, m.boot, `{"visibility":"public","name":"memory"}`)["cluster_id"].(string)
			alice := enterWall(b, m.boot, id, q("agent", "alice"))
			var perPeer float64
			for b.Loop() {
				before := heapInUse()
				tabs := make([]*pageTab, pages)
				for i := range tabs {
					tabs[i] = openPage(b, m.boot.URL()+"/clusters/"+id+"?transport="+transport)
					tabs[i].join(fmt.Sprintf("page-%d", i))
				}
				for range pages {
					alice.next("presence")
				}
				perPeer += float64(int64(heapInUse())-int64(before)) / pages
				for _, p := range tabs {
					p.close()
				}
				for range pages {
					alice.next("presence")
				}
			}
			b.ReportMetric(perPeer/float64(b.N)/1024, "KiB/peer")
		})
	}
}

// heapInUse is the heap and stacks this process uses, after a collection
// (two: the second frees what the first's finalizers let go).
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}
