// Package schema holds the JSON Schema of fleet.json (draft 2020-12). The
// binary embeds it to validate documents and prints it for editors
// (`fleet-agent schema`).
package schema

import _ "embed"

// JSON is the schema document, byte for byte as committed.
//
//go:embed fleet.schema.json
var JSON []byte

// ID is the schema's $id, the name it is compiled under.
const ID = "https://fleet-agent.dev/schema/fleet.schema.json"
