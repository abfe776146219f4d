// Package annotation holds the one type that the agent, the outbox and the
// forge share for check-run annotations: a line of a file in the repository
// and what to say there. It is its own package because the outbox must not
// import the forge (the forge's tests run the outbox) and the forge's
// adapter for the outbox must name the same type the outbox declares.
package annotation

// The levels GitHub shows an annotation with.
const (
	Notice  = "notice"
	Warning = "warning"
	Failure = "failure"
)

// Annotation is a line annotation of a check run.
type Annotation struct {
	Path string `json:"path"`
	// Line and Column count from 1; Column 0 leaves the column out.
	Line    int    `json:"line"`
	Column  int    `json:"column,omitempty"`
	Level   string `json:"level"`
	Title   string `json:"title,omitempty"`
	Message string `json:"message"`
}
