package outbox

// SetAfterSend installs the crash hook: fn runs after GitHub took a post and
// before the outbox records it; true stops the step there, as a kill would.
func SetAfterSend(o *Outbox, fn func(Post) bool) { o.afterSend = fn }

// ErrCrashed is what Flush returns when the hook stopped it.
var ErrCrashed = errCrashed

func PostsEqual(a, b Post) bool { return a.equal(b) }
