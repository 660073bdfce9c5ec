// Weir test fixture: a hostile / curious Go stage (as plugins/probe-{python,js}). Each message
// value names a probe; the answer comes back as a reject reason (so it reaches the reject
// file), or the probe misbehaves:
//
//	read-file   open /etc/hostname          env          how many environment variables
//	memory      the Go heap and the runtime's memory from the OS (runtime.MemStats)
//	goroutine   a goroutine's answer over a channel, within the call
//	sleep:MS    time.Sleep for MS milliseconds, and how long it took
//	loop        spin forever                bomb         allocate until the memory cap
//	trap        panic                       anything else passes unchanged
package main

import (
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

func init() { weir.Stage(probe) }

func main() {}
