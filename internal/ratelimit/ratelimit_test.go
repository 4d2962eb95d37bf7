package ratelimit

import (
	"testing"
	"time"

	"golang.org/x/time/rate"
)

func TestBucketPerKey(t *testing.T) {
	now := time.Now()
	l := NewKeyed[string](1, 2, 10)
	a := l.Bucket("a", now)
	if !a.AllowN(now, 2) || a.AllowN(now, 1) {
		t.Fatal("a's bucket does not hold 2 tokens")
	}
	if l.Bucket("a", now) != a {
		t.Fatal("a got a second bucket")
	}
	if !l.Bucket("b", now).AllowN(now, 2) {
		t.Fatal("b shares a's bucket")
	}
	if !a.AllowN(now.Add(time.Second), 1) {
		t.Fatal("a's bucket did not refill")
	}
}

// TestForgetsFullBucketsFirst: past max buckets, the idle keys' (full)
// buckets go and the busy keys keep what they spent; when every bucket is
// busy, all go.
func TestForgetsFullBucketsFirst(t *testing.T) {
	now := time.Now()
	l := NewKeyed[int](rate.Every(time.Hour), 1, 3)
	l.Bucket(1, now).AllowN(now, 1)
	l.Bucket(2, now)
	l.Bucket(3, now)
	l.Bucket(4, now)
	if l.Len() != 2 {
		t.Fatalf("%d buckets after forgetting the full ones, want 2 (1 and 4)", l.Len())
	}
	if l.Bucket(1, now).AllowN(now, 1) {
		t.Fatal("the busy key got a fresh bucket")
	}
	l.Bucket(4, now).AllowN(now, 1)
	l.Bucket(5, now).AllowN(now, 1)
	l.Bucket(6, now)
	if l.Len() != 3 {
		t.Fatalf("%d buckets after every bucket was busy, want 3 (one busy one forgotten)", l.Len())
	}
}

// TestBusyBucketsMakeRoomAhead: when every bucket is busy, a new key frees
// an eighth of them, so the next keys up to that are taken without
// forgetting (or scanning) anything.
func TestBusyBucketsMakeRoomAhead(t *testing.T) {
	now := time.Now()
	l := NewKeyed[int](rate.Every(time.Hour), 1, 80)
	for k := range 80 {
		l.Bucket(k, now).AllowN(now, 1)
	}
	l.Bucket(80, now)
	if l.Len() != 71 {
		t.Fatalf("%d buckets after a new key met 80 busy ones, want 71", l.Len())
	}
	for k := 81; k < 90; k++ {
		l.Bucket(k, now)
	}
	if l.Len() != 80 {
		t.Fatalf("%d buckets, want 80: keys were forgotten before the room made ahead was used", l.Len())
	}
}
