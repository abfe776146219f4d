package fleet

import (
	"fmt"
)

// anchor says where in the text an error sorts.
type anchor int

const (
	atValue  anchor = iota // the value the pointer names
	atKey                  // the key the pointer names (unknown field, invalid key)
	atParent               // the parent object (a missing field)
)

type finding struct {
	ptr    string
	msg    string
	anchor anchor
}

// Validate parses and validates a document in both stages (the schema, then
// the rules a schema cannot say). It returns the document in normal form, or
// every error, in text order, at most MaxErrors (+1 summing up the rest).
func Validate(file string, data []byte) (*Document, Errors) {
	return validateWith(file, data, schemaFindings)
}

// validateWith is Validate with the schema stage given: the oracle test
// runs it with santhosh-tekuri/jsonschema in that place.
func validateWith(file string, data []byte, schemaStage func(tree any) []finding) (*Document, Errors) {
	tree, p := parseDocument(data, false)
	if p.err != nil {
		es := finish(file, []Error{{Message: p.err.msg, Path: "", offset: p.err.off}})
		place(data, es)
		return nil, es
	}
	found := schemaStage(tree)
	found = append(found, ruleFindings(tree)...)
	if len(found) == 0 && p.dups == 0 && p.bad == 0 {
		doc, err := decodeDocument(tree)
		if err != nil {
			// The schema and the rules admitted something the model cannot
			// hold: a bug, but the user still gets a refusal, not a panic.
			return nil, finish(file, []Error{{Message: "internal: " + err.Error(), Path: ""}})
		}
		return doc, nil
	}
	// Something is wrong: parse again keeping offsets so that every error
	// sorts where its value stands in the text.
	_, tp := parseDocument(data, true)
	var es []Error
	for _, d := range tp.dupDetails {
		es = append(es, Error{Path: d.pointer, offset: d.off,
			Message: fmt.Sprintf("key %q is repeated in this object; the first value is kept, remove the others", lastToken(d.pointer))})
	}
	// A number beyond a double is refused once, at its pointer: what the
	// stages said of its stand-in is not about the number written.
	badAt := map[string]bool{}
	for _, b := range tp.badNumbers {
		badAt[b.pointer] = true
		es = append(es, Error{Path: b.pointer, offset: b.off, Message: numberRangeMessage})
	}
	for _, f := range found {
		if badAt[f.ptr] && f.anchor == atValue {
			continue
		}
		es = append(es, Error{Path: f.ptr, Message: f.msg, offset: offsetOf(tp, f)})
	}
	out := finish(file, es)
	place(data, out)
	return nil, out
}

func offsetOf(p *parser, f finding) int {
	ptr := f.ptr
	switch f.anchor {
	case atKey:
		if off, ok := p.keyOff[ptr]; ok {
			return off
		}
	case atParent:
		ptr = parentPointer(ptr)
	}
	off, _ := p.nearestValue(ptr)
	return off
}
