package refs

import "testing"

func TestShort(t *testing.T) {
	for in, want := range map[string]string{
		"":                 "",
		"abc":              "abc",
		"0123456789ab":     "0123456789ab",
		"0123456789abcdef": "0123456789ab",
	} {
		if got := Short(in); got != want {
			t.Errorf("Short(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPullRefs(t *testing.T) {
	if got := PullHead(7); got != "refs/pull/7/head" {
		t.Fatalf("PullHead(7) = %q", got)
	}
	for _, tc := range []struct {
		ref string
		n   int
		ok  bool
	}{
		{"refs/pull/7/head", 7, true},
		{"refs/pull/123/head", 123, true},
		{"refs/pull/7/merge", 0, false},
		{"refs/pull/0/head", 0, false},
		{"refs/pull/-1/head", 0, false},
		{"refs/pull/07/head", 0, false},
		{"refs/pull//head", 0, false},
		{"refs/heads/main", 0, false},
	} {
		n, ok := PullNumber(tc.ref)
		if n != tc.n || ok != tc.ok || IsPullHead(tc.ref) != tc.ok {
			t.Errorf("PullNumber(%q) = %d, %v; want %d, %v", tc.ref, n, ok, tc.n, tc.ok)
		}
	}
}

func TestQueueRefs(t *testing.T) {
	base := "refs/heads/gh-readonly-queue/main/"
	if got := QueuePrefix("main"); got != base {
		t.Fatalf("QueuePrefix = %q", got)
	}
	for _, tc := range []struct {
		ref string
		n   int
		ok  bool
	}{
		{base + "pr-42-0123456789abcdef0123456789abcdef01234567", 42, true},
		{base + "pr-7-abc", 7, true},
		{"refs/heads/gh-readonly-queue/release/pr-7-abc", 0, false}, // another branch's queue
		{base + "pr-07-abc", 0, false},
		{base + "pr-x-abc", 0, false},
		{base + "pr-7-abc/more", 0, false},
		{base + "other", 0, false},
		{"refs/heads/main", 0, false},
	} {
		n, ok := QueuePull(tc.ref, "main")
		if n != tc.n || ok != tc.ok {
			t.Errorf("QueuePull(%q) = %d, %v; want %d, %v", tc.ref, n, ok, tc.n, tc.ok)
		}
	}
}
