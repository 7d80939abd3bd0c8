package workerkit

import (
	"runtime"
	"strconv"
	"testing"
	"time"
)

func TestFinishedMemoWindowAndBound(t *testing.T) {
	f := newFinishedMemo(time.Minute, 3)
	t0 := time.Unix(1000, 0)
	f.add("a", t0, memoEntry{})
	f.add("b", t0.Add(time.Second), memoEntry{term: true})
	if e, ok := f.get("b", t0.Add(2*time.Second)); !ok || !e.term {
		t.Errorf("b: got %+v %v, want remembered as dropped", e, ok)
	}
	f.recorded("a", "failed")
	if e, _ := f.get("a", t0.Add(2*time.Second)); !e.recorded || memoStatuses[e.status] != "failed" {
		t.Errorf("a: got %+v, want recorded, failed", e)
	}
	// The window: a is forgotten a minute after it finished, b a second later.
	if _, ok := f.get("a", t0.Add(time.Minute)); ok {
		t.Errorf("a remembered a minute after it finished")
	}
	if _, ok := f.get("b", t0.Add(time.Minute)); !ok {
		t.Errorf("b forgotten before its minute")
	}
	// The bound: three ids at most, the oldest out first.
	now := t0.Add(time.Minute)
	for _, id := range []string{"c", "d", "e"} {
		f.add(id, now, memoEntry{})
	}
	if _, ok := f.get("b", now); ok || f.len() != 3 {
		t.Errorf("after c, d, e: b remembered %v, %d ids; want b out, 3 ids", ok, f.len())
	}
	// An id finished again (it ran again after being forgotten) counts from then.
	f.add("c", now.Add(30*time.Second), memoEntry{})
	if _, ok := f.get("c", now.Add(80*time.Second)); !ok {
		t.Errorf("c forgotten by its first finish")
	}
}

// TestFinishedMemoBytesPerID fills the memory to FinishedIDs and reports
// its heap per id (the figure in FinishedIDs's comment).
func TestFinishedMemoBytesPerID(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f := newFinishedMemo(FinishedWindow, FinishedIDs)
	now := time.Now()
	for i := range FinishedIDs {
		f.add("request-"+strconv.Itoa(i), now, memoEntry{})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / FinishedIDs
	t.Logf("%d ids: %.0f bytes per id", f.len(), per)
	if f.len() != FinishedIDs {
		t.Errorf("remembered %d ids, want %d", f.len(), FinishedIDs)
	}
	if per > 128 {
		t.Errorf("%.0f bytes per id, want well under 128", per)
	}
	runtime.KeepAlive(f)
}
