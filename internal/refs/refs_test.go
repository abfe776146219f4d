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
