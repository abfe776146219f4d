// Package doctl holds doemu to DigitalOcean's own command line client: a
// transcript of what doctl sent and received in each of its Kubernetes
// flows, recorded against the emulator (go test -record, with a doctl
// binary), and a replay of those requests against a fresh emulator that
// runs without doctl and checks the answers doctl parsed.
//
// doctl is a test dependency only; nothing of the product imports this.
package doctl
