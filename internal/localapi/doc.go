// Package localapi is the local API: HTTP over the agent's unix socket, so
// the command line, the doctor and the page reach the fleet while the
// agent holds the store. It holds the wire types (the requests, the
// answers, the status JSON), the handler of every route, the socket's
// listener and server with their limits and peer credentials, and the
// client. The handler serves a Loop, declared here, which the agent
// implements; this package never imports the agent.
package localapi
