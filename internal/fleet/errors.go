package fleet

import (
	"fmt"
	"sort"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// MaxErrors is how many errors one validation reports before it sums up the
// rest in one last error.
const MaxErrors = 100

// Error is one reason a document is refused: the shape `validate -o json`
// prints and the agent posts.
type Error struct {
	File    string `json:"file"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Path is a JSON Pointer (RFC 6901) to the offending value; "" for the
	// whole document.
	Path string `json:"path"`
	// Position is where the error stands in the text: the value the pointer
	// names, its key for an unknown field, an invalid key or a repeated key
	// (the repeat), its parent object for a missing field, and the offending
	// byte for a text that is not JSON. Zero for the summary of errors not
	// shown and for a file that could not be read. It is not part of the
	// JSON of `validate -o json` (docs/document.md names its fields).
	Position `json:"-"`

	offset  int  // byte offset that orders errors as the values stand in the text
	summary bool // the last error, summing up those not shown
}

// String is the error as `validate` prints it: `FILE:POINTER: message` for
// an error about a value, and for one about the whole text (a syntax error,
// a size limit, the sum of errors not shown) `FILE:LINE:COLUMN: message`
// where the place is known, else `FILE: message`, so that an editor can jump
// to a syntax error and no line reads `FILE::`.
//
// The line is plain (textline.Plain): the pointer holds the author's keys
// as written, and a line break or a terminal's escape in one must not forge
// a line of a CI log. The JSON keeps the pointer exact.
func (e Error) String() string {
	switch {
	case e.Path != "":
		return textline.Plain(e.File + ":" + e.Path + ": " + e.Message)
	case !e.Position.IsZero():
		return textline.Plain(fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Message))
	}
	return textline.Plain(e.File + ": " + e.Message)
}

// Errors is the refusal of a document. It is also an error, with the code
// INVALID_INPUT, so commands can return it as it is.
type Errors []Error

func (es Errors) Error() string {
	if len(es) == 0 {
		return "no errors"
	}
	if len(es) == 1 {
		return es[0].String()
	}
	return fmt.Sprintf("%s (and %d more)", es[0].String(), len(es)-1)
}

// Refusal wraps es as an INVALID_INPUT refusal for the command line.
func (es Errors) Refusal() *refusal.Error {
	return &refusal.Error{Code: refusal.InvalidInput, Message: es.Error(), Path: es[0].Path, Err: es}
}

// Text prints one `FILE:POINTER: message` line per error.
func (es Errors) Text() string {
	var b strings.Builder
	for _, e := range es {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// finish orders errors as their values stand in the text, keeps the first
// MaxErrors and sums up the rest.
func finish(file string, es []Error) Errors {
	sort.SliceStable(es, func(i, j int) bool { return es[i].offset < es[j].offset })
	for i := range es {
		es[i].File = file
		es[i].Code = string(refusal.InvalidInput)
	}
	if len(es) > MaxErrors {
		more := len(es) - MaxErrors
		es = append(es[:MaxErrors:MaxErrors], Error{
			File:    file,
			Code:    string(refusal.InvalidInput),
			Message: fmt.Sprintf("%d more errors not shown; fix the ones above and validate again", more),
			Path:    "",
			summary: true,
		})
	}
	return es
}
