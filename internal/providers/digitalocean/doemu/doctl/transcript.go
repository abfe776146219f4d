package doctl

import "encoding/json"

// Transcript is what doctl sent and received, flow by flow.
type Transcript struct {
	Client  string `json:"client"`
	Version string `json:"version"`
	Source  string `json:"source"`
	Licence string `json:"licence"`
	// Godo is the godo version doctl vendors: what actually spoke HTTP.
	Godo  string `json:"godo"`
	Note  string `json:"note"`
	Flows []Flow `json:"flows"`
}

// Flow is one doctl invocation.
type Flow struct {
	Name string   `json:"name"`
	Args []string `json:"args"`
	Exit int      `json:"exit"`
	// Stdout is doctl's output: parsed JSON with -o json, else the text.
	Stdout    json.RawMessage `json:"stdout,omitempty"`
	StdoutRaw string          `json:"stdout_text,omitempty"`
	Stderr    string          `json:"stderr,omitempty"`
	Exchanges []Exchange      `json:"exchanges"`
}

// Exchange is one request of a flow and its answer, bodies as JSON where
// they are JSON and as text otherwise.
type Exchange struct {
	Method       string          `json:"method"`
	Path         string          `json:"path"`
	Query        string          `json:"query,omitempty"`
	Body         json.RawMessage `json:"body,omitempty"`
	Status       int             `json:"status"`
	ContentType  string          `json:"content_type,omitempty"`
	Response     json.RawMessage `json:"response,omitempty"`
	ResponseText string          `json:"response_text,omitempty"`
}
