package sandboxruntime

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// rtCollect follows l to the end and returns its records.
func rtCollect(t *testing.T, ctx context.Context, l *Output) []Record {
	t.Helper()
	var out []Record
	if err := l.Follow(ctx, func(r Record) error {
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatalf("follow: %v", err)
	}
	return out
}

func TestRuntimeOutputLogFollowers(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	l := newOutput()
	l.append("stdout", "early\n")
	const followers = 8
	results := make([][]Record, followers)
	var wg sync.WaitGroup
	for i := range followers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = rtCollect(t, ctx, l)
		}()
	}
	var want []Record
	want = append(want, Record{"stdout", "early\n"})
	for i := range 100 {
		stream := "stdout"
		if i%3 == 0 {
			stream = "stderr"
		}
		rec := Record{stream, strings.Repeat("x", i+1)}
		l.append(rec.Stream, rec.Data)
		want = append(want, rec)
		if i%10 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	l.append("stdout", "") // empty chunks are not records
	l.close()
	l.append("stdout", "after close") // dropped
	wg.Wait()
	for i, got := range results {
		if len(got) != len(want) {
			t.Fatalf("follower %d got %d records, want %d", i, len(got), len(want))
		}
		for j := range want {
			if got[j] != want[j] {
				t.Fatalf("follower %d record %d = %+v, want %+v", i, j, got[j], want[j])
			}
		}
	}
	// A follower that starts after the end replays everything and returns.
	if got := rtCollect(t, ctx, l); len(got) != len(want) {
		t.Fatalf("late follower got %d records, want %d", len(got), len(want))
	}
}

func TestRuntimeOutputLogFollowEnds(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	l := newOutput()
	l.append("stdout", "a")

	// The context ends the follow of a log that stays open.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	seen := make(chan struct{}, 1)
	go func() {
		errc <- l.Follow(ctx, func(Record) error { seen <- struct{}{}; return nil })
	}()
	<-seen
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("follow after cancel = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not return after its context ended")
	}

	// An error from fn stops the follow and is returned.
	stop := errors.New("client went away")
	if err := l.Follow(context.Background(), func(Record) error { return stop }); err != stop {
		t.Fatalf("follow = %v, want fn's error", err)
	}
}

func TestRuntimeOutputLogCap(t *testing.T) {
	l := newOutput()
	chunk := strings.Repeat("y", 1<<20)
	for range maxOutputBytes/len(chunk) + 3 {
		l.append("stdout", chunk)
	}
	l.close()
	recs, closed := l.snapshot()
	if !closed {
		t.Fatal("log not closed")
	}
	last := recs[len(recs)-1]
	if last.Stream != "stderr" || last.Data != outputTruncatedNotice {
		t.Fatalf("last record = %q on %s, want the truncation notice", last.Data[:min(len(last.Data), 40)], last.Stream)
	}
	total := 0
	for _, r := range recs[:len(recs)-1] {
		total += len(r.Data)
	}
	if total > maxOutputBytes {
		t.Fatalf("kept %d bytes, more than the cap %d", total, maxOutputBytes)
	}
}

func TestRuntimeUTF8Splitter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
	}{
		{"ascii", []string{"hello ", "world"}},
		{"two-byte split", []string{"caf\xc3", "\xa9!"}},
		{"four-byte split thrice", []string{"\xf0", "\x9f", "\x98", "\x80 ok"}},
		{"invalid bytes pass", []string{"\xff\xfe", "x"}},
		{"incomplete at end", []string{"abc\xe2\x82"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sp utf8Splitter
			var out []string
			for _, c := range tc.chunks {
				out = append(out, sp.push([]byte(c)))
			}
			out = append(out, sp.flush())
			if got, want := strings.Join(out, ""), strings.Join(tc.chunks, ""); got != want {
				t.Fatalf("joined output %q, want %q", got, want)
			}
			for _, s := range out[:len(out)-1] {
				if n := completeUTF8Prefix([]byte(s)); n != len(s) {
					t.Fatalf("chunk %q ends in a split UTF-8 sequence", s)
				}
			}
		})
	}
}
