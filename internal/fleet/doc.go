// Package fleet is the document: the typed model of fleet.json, its strict
// parser, validation in two stages (the embedded JSON Schema, then the rules
// a schema cannot say), the normal form every later step compares, and the
// canonical bytes that plans, hashes and the applied record use.
//
// A document is trusted only after Validate: every refusal carries a JSON
// Pointer to the offending value, in the order the values stand in the text.
//
// The files follow the way a document goes: read.go and parse.go (bytes to
// a value tree), validate.go (the two stages and the order of the errors),
// schema.go and integer.go (the schema stage: compiling the schema, the
// integer keyword, each failing keyword given the documented pointers),
// messages.go (how those errors are worded), rules.go (what the schema
// cannot say), pointer.go (JSON Pointers), model.go (the normal form) and
// errors.go (the refusal). oracle_test.go holds the schema stage to
// santhosh-tekuri/jsonschema, which the tests use and the binary does not.
package fleet
