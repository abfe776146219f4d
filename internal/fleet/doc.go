// Package fleet is the document: the typed model of fleet.json, its strict
// parser, validation in two stages (the embedded JSON Schema, then the rules
// a schema cannot say), the normal form every later step compares, and the
// canonical bytes that plans, hashes and the applied record use.
//
// A document is trusted only after Validate: every refusal carries a JSON
// Pointer to the offending value, in the order the values stand in the text.
package fleet
