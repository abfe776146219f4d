package githubemu

import (
	"encoding/json"
	"fmt"
)

// QueueRef is the branch GitHub's merge queue makes for pull request pr
// queued on branch at base: gh-readonly-queue/<branch>/pr-<pr>-<base sha>.
// The name is GitHub's documented prefix; the pr-<N>-<sha> tail is the form
// seen on github.com, not a documented format.
func QueueRef(branch string, pr int, base string) string {
	return fmt.Sprintf("refs/heads/gh-readonly-queue/%s/pr-%d-%s", branch, pr, base)
}

// MergeGroupEvent is the body of a merge_group webhook delivery (action
// checks_requested) for the queue entry of pull request pr on branch, whose
// commit head GitHub built on base. Its fields are those GitHub's webhook
// documentation lists for merge_group (head_sha, head_ref, base_sha,
// base_ref, head_commit); the emulator does not send webhooks itself: a test
// signs this body and posts it to the agent's handler.
func (r *Repo) MergeGroupEvent(branch string, pr int, base, head string) []byte {
	b, err := json.Marshal(map[string]any{
		"action": "checks_requested",
		"merge_group": map[string]any{
			"head_sha": head, "head_ref": QueueRef(branch, pr, base),
			"base_sha": base, "base_ref": "refs/heads/" + branch,
			"head_commit": map[string]any{"id": head, "tree_id": head, "message": fmt.Sprintf("Merge pull request #%d", pr)},
		},
		"repository": map[string]any{"id": r.id, "name": r.name, "full_name": r.owner + "/" + r.name},
	})
	if err != nil {
		panic(err)
	}
	return b
}
