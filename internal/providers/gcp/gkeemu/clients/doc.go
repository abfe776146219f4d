// Package clients holds the test suites that drive gkeemu with Google's own
// other clients as Google ships them: gcloud (`gcloud auth
// activate-service-account`, `gcloud container clusters ...`, `node-pools
// ...`, `operations ...`), pointed at the emulator only through its
// documented endpoint overrides. So the emulator is held to what clients
// nobody here wrote send and parse, not only to the project's own SDK calls.
// It has no code of its own: the clients are test dependencies, and a
// missing one fails the suite with how to install it.
package clients
