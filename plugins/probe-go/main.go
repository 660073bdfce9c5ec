// Weir test fixture: a hostile / curious Go stage (as plugins/probe-{python,js}). Each message
// value names a probe; the answer comes back as a reject reason (so it reaches the reject
// file), or the probe misbehaves:
//
//	read-file   open /etc/hostname          env          how many environment variables
//	memory      the Go heap and the runtime's memory from the OS (runtime.MemStats)
//	goroutine   a goroutine's answer over a channel, within the call
//	sleep:MS    time.Sleep for MS milliseconds, and how long it took
//	state:N     set an N-byte value in the bucket `probe`, read it back 20 times (with
//	            garbage made between the reads), and with get-many: `state ok` or what differed
//	loop        spin forever                bomb         allocate until the memory cap
//	trap        panic                       anything else passes unchanged
package main

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	weir "weir.dev/sdk"
)

var hoard [][]byte

func probe(m *weir.Message, _ weir.Metadata) weir.Outcome {
	v := string(m.Value)
	switch {
	case v == "read-file":
		if b, err := os.ReadFile("/etc/hostname"); err != nil {
			return weir.Reject("probe: file read denied: " + err.Error())
		} else {
			return weir.Reject("probe: file read allowed: " + strings.TrimSpace(string(b)))
		}
	case v == "env":
		return weir.Reject("probe: " + strconv.Itoa(len(os.Environ())) + " environment variables")
	case v == "memory":
		var s runtime.MemStats
		runtime.ReadMemStats(&s)
		return weir.Reject("probe: heap " + strconv.FormatUint(s.HeapAlloc>>10, 10) + " KiB, from the OS " +
			strconv.FormatUint(s.Sys>>10, 10) + " KiB")
	case v == "goroutine":
		ch := make(chan int)
		go func() { ch <- 42 }()
		select {
		case n := <-ch:
			return weir.Reject("probe: goroutine answered " + strconv.Itoa(n))
		case <-time.After(time.Second):
			return weir.Reject("probe: goroutine did not answer in 1 s")
		}
	case strings.HasPrefix(v, "sleep:"):
		ms, _ := strconv.Atoi(v[len("sleep:"):])
		t := time.Now()
		time.Sleep(time.Duration(ms) * time.Millisecond)
		return weir.Reject("probe: slept " + strconv.FormatInt(time.Since(t).Milliseconds(), 10) + " ms")
	case strings.HasPrefix(v, "state:"):
		return weir.Reject("probe: " + stateRoundTrip(v))
	case v == "loop":
		for n := 0; ; n++ {
			if n < 0 {
				return weir.Keep()
			}
		}
	case v == "bomb":
		for {
			hoard = append(hoard, make([]byte, 1<<20))
		}
	case v == "trap":
		panic("probe asked to trap")
	}
	return weir.Keep()
}

// stateRoundTrip stores a value of the size after `state:` and reads it back: the host writes
// each answer into memory it asks the SDK for while the call is in progress.
func stateRoundTrip(v string) string {
	n, err := strconv.Atoi(v[len("state:"):])
	if err != nil {
		return "state: " + err.Error()
	}
	b, err := weir.OpenBucket("probe")
	if err != nil {
		return "state: " + err.Error()
	}
	want := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
	if err := b.Set(v, want); err != nil {
		return "state: set: " + err.Error()
	}
	for i := 0; i < 20; i++ {
		hoard = append(hoard[:0], make([]byte, 256<<10)) // garbage between the reads
		got, ok, err := b.Get(v)
		if err != nil || !ok || !bytes.Equal(got, want) {
			return "state: read " + strconv.Itoa(i) + " differs"
		}
	}
	many, err := b.GetMany([]string{v, "absent", v})
	if err != nil || len(many) != 3 || !bytes.Equal(many[0], want) || many[1] != nil || !bytes.Equal(many[2], want) {
		return "state: get-many differs"
	}
	return "state ok"
}

func init() { weir.Stage(probe) }

func main() {}
