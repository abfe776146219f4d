// Package refs is how this project names git objects to people and to
// GitHub: short hashes in messages and statuses, and the refs of pull
// request heads. One home, so that a status, a comment and a log line name
// a commit the same way.
package refs

import (
	"strconv"
	"strings"
)

// ShortLen is how many hex digits a short hash keeps: enough to be unique
// in any repository a fleet lives in, short enough for a status line.
const ShortLen = 12

// Short cuts a commit hash (or a plan hash) to ShortLen characters.
func Short(hash string) string {
	if len(hash) > ShortLen {
		return hash[:ShortLen]
	}
	return hash
}

const (
	pullPrefix = "refs/pull/"
	pullSuffix = "/head"
)

// PullHead is the ref GitHub keeps for pull request n's head.
func PullHead(n int) string { return pullPrefix + strconv.Itoa(n) + pullSuffix }

// PullNumber is the number of a pull request head ref, and whether ref is
// one.
func PullNumber(ref string) (int, bool) {
	rest, ok := strings.CutPrefix(ref, pullPrefix)
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(rest, pullSuffix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 || strconv.Itoa(n) != num {
		return 0, false
	}
	return n, true
}

// IsPullHead reports whether ref is a pull request head ref.
func IsPullHead(ref string) bool { _, ok := PullNumber(ref); return ok }

// queueRoot is where GitHub's merge queue keeps its temporary branches:
// refs/heads/gh-readonly-queue/<branch>/pr-<number>-<base sha>, one per
// queue entry, whose commit is the branch with that pull request (and those
// ahead of it in the queue) merged.
const queueRoot = "refs/heads/gh-readonly-queue/"

// QueuePrefix is the prefix of the merge queue refs of branch.
func QueuePrefix(branch string) string { return queueRoot + branch + "/" }

// QueuePull is the pull request number a merge queue ref of branch names
// (pr-<number>-...), and whether ref is one.
func QueuePull(ref, branch string) (int, bool) {
	rest, ok := strings.CutPrefix(ref, QueuePrefix(branch))
	if !ok {
		return 0, false
	}
	rest, ok = strings.CutPrefix(rest, "pr-")
	if !ok {
		return 0, false
	}
	num, _, _ := strings.Cut(rest, "-")
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 || strconv.Itoa(n) != num || strings.Contains(rest, "/") {
		return 0, false
	}
	return n, true
}
