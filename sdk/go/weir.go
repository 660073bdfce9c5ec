// Package weir is the Go SDK for Weir stages: a stage is a function from a message to an
// outcome, registered with [Stage] in the program's init, built with `weir-build-go` into a
// component (a wasip1 reactor whose exports are the contract's, wrapped by
// `weir component new --world stage-typed`).
//
//	package main
//
//	import weir "weir.dev/sdk"
//
//	func init() {
//		weir.Stage(func(m *weir.Message, meta weir.Metadata) weir.Outcome {
//			return weir.Keep()
//		})
//	}
//
//	func main() {}
package weir

import "strconv"

// Header is one message header; a nil Value is an absent one.
type Header struct {
	Key   string
	Value []byte
}

// Message is a message as a stage sees and emits it. A nil Key or Value is absent.
type Message struct {
	Key     []byte
	Value   []byte
	Headers []Header
	// Timestamp in milliseconds since the Unix epoch; nil when absent.
	Timestamp *int64
	// Topic routes an emitted message (nil: the sink's topic). Input messages have none.
	Topic *string
}

// Header returns the value of the first header named key, and whether there is one.
func (m *Message) Header(key string) ([]byte, bool) {
	for _, h := range m.Headers {
		if h.Key == key {
			return h.Value, true
		}
	}
	return nil, false
}

// WithHeader returns a copy of the message with one more header (the input's headers are
// not changed).
func (m *Message) WithHeader(key string, value []byte) Message {
	out := *m
	out.Headers = append(append(make([]Header, 0, len(m.Headers)+1), m.Headers...), Header{key, value})
	return out
}

// Metadata says where an input message came from.
type Metadata struct {
	Topic     string
	Partition int32
	Offset    int64
}

// Kind says which outcome an [Outcome] is.
type Kind uint8

// The outcomes, in the contract's order.
const (
	KindKeep Kind = iota
	KindNext
	KindReject
	KindFail
)

func (k Kind) String() string {
	switch k {
	case KindKeep:
		return "keep"
	case KindNext:
		return "next"
	case KindReject:
		return "reject"
	case KindFail:
		return "fail"
	}
	return "unknown"
}

// Outcome is what becomes of one input message.
type Outcome struct {
	kind   Kind
	next   []Message
	reason string
}

// Kind is which outcome this is ([Drop] is a [KindNext] with no messages).
func (o Outcome) Kind() Kind { return o.kind }

// Messages are the messages that continue instead of the input ([KindNext]).
func (o Outcome) Messages() []Message { return o.next }

// Reason is the reason of a [KindReject] or [KindFail].
func (o Outcome) Reason() string { return o.reason }

// String shows the outcome as test failures print it: `next(2)`, `reject: no value`.
func (o Outcome) String() string {
	switch o.kind {
	case KindNext:
		return o.kind.String() + "(" + strconv.Itoa(len(o.next)) + ")"
	case KindReject, KindFail:
		return o.kind.String() + ": " + o.reason
	}
	return o.kind.String()
}

// Keep lets the input continue unchanged.
func Keep() Outcome { return Outcome{kind: KindKeep} }

// Next lets these messages continue instead of the input (none: the input is dropped).
func Next(msgs ...Message) Outcome { return Outcome{kind: KindNext, next: msgs} }

// Drop filters the input out.
func Drop() Outcome { return Outcome{kind: KindNext} }

// Reject sends the input to the reject path with a reason.
func Reject(reason string) Outcome { return Outcome{kind: KindReject, reason: reason} }

// Fail stops the pipeline with a reason.
func Fail(reason string) Outcome { return Outcome{kind: KindFail, reason: reason} }

// Config is the stage's `config` map from the pipeline YAML (values rendered as strings).
type Config map[string]string

// Process handles one message.
type Process func(m *Message, meta Metadata) Outcome

var (
	process Process
	setup   func(Config) error
)

// Stage registers the stage's function. Call it from the program's init.
func Stage(p Process) { process = p }

// StageWithInit registers the stage's function and its init, which reads the config once
// before any message; an error stops the pipeline at start-up, naming the stage.
func StageWithInit(init func(Config) error, p Process) {
	setup = init
	process = p
}

// initStage runs the registered init with the config; an error says what to fix.
func initStage(cfg Config) error {
	if process == nil {
		return errNoStage
	}
	if setup != nil {
		return setup(cfg)
	}
	return nil
}

type stageError string

func (e stageError) Error() string { return string(e) }

const errNoStage = stageError("no stage registered: call weir.Stage in the program's init")

// Init runs the registered stage's init with this config, as the host does once per
// instance before any message (for native tests; see [Call]).
func Init(cfg Config) error { return initStage(cfg) }

// Call hands one message to the registered stage, as the host does (for native tests: state
// calls go to in-memory buckets, which [ResetState] empties).
func Call(m Message, meta Metadata) Outcome {
	if process == nil {
		return Fail(string(errNoStage))
	}
	return process(&m, meta)
}
