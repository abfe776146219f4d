// Package boundary holds the test that keeps the house's one rule: the
// orchestration packages (fleet, state, plan, apply, gitsync, agent,
// substrate) never reach a cloud SDK or go-github, not even through another
// package of ours, and provider adapters never import one another. Only
// cmd/fleet-agent wires adapters in.
package boundary
