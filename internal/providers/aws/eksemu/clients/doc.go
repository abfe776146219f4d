// Package clients holds the test suite that drives eksemu with the AWS CLI
// as AWS ships it (`aws eks ...`, `aws eks wait ...`, `aws ec2
// describe-availability-zones`, `aws eks get-token`), so the emulator is
// held to what a client nobody here wrote sends and parses, not only to
// the project's own SDK calls. It has no code of its own: the CLI is a test
// dependency, and a missing CLI fails the suite with how to install it.
package clients
