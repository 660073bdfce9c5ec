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

// Metadata says where an input message came from.
type Metadata struct {
	Topic     string
	Partition int32
	Offset    int64
}

// Outcome is what becomes of one input message.
type Outcome struct {
	kind   uint8
	next   []Message
	reason string
}

// Keep lets the input continue unchanged.
func Keep() Outcome { return Outcome{kind: 0} }

// Next lets these messages continue instead of the input (none: the input is dropped).
func Next(msgs ...Message) Outcome { return Outcome{kind: 1, next: msgs} }

// Drop filters the input out.
func Drop() Outcome { return Outcome{kind: 1} }

// Reject sends the input to the reject path with a reason.
func Reject(reason string) Outcome { return Outcome{kind: 2, reason: reason} }

// Fail stops the pipeline with a reason.
func Fail(reason string) Outcome { return Outcome{kind: 3, reason: reason} }

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
