// Package schema holds the JSON Schemas (draft 2020-12) of fleet.json and
// of a policy file. The binary embeds the first to validate documents, and
// prints either for editors (`fleet-agent schema`, `fleet-agent schema
// --policy`).
package schema

import _ "embed"

// JSON is the schema document, byte for byte as committed.
//
//go:embed fleet.schema.json
var JSON []byte

// ID is the schema's $id, the name it is compiled under.
const ID = "https://fleet-agent.dev/schema/fleet.schema.json"

// PolicyJSON is the schema of a policy file (docs/policy.md), byte for byte
// as committed. The policy loader checks the same rules with the line of
// each problem; a test holds the two to the same enumerations.
//
//go:embed policy.schema.json
var PolicyJSON []byte
