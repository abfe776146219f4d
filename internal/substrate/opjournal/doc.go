// Package opjournal is the journal of provider operations: the state
// machine every operation moves through (journaled, in flight, verifying,
// accepted, then succeeded or failed), written before each provider call so
// that a crash anywhere leaves an operation whose outcome can be settled by
// reading the provider back, and the driver that moves one operation as far
// as it goes now.
//
// The driver knows operations, events and the calls its caller hands it
// (Calls, Journal); nothing of what the operations are for. What its caller
// used to learn by being called back (that what an operation works on is
// gone, how to name it) is in the Outcome or among the Inputs.
package opjournal
