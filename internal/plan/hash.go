package plan

import (
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// HashLen is the length of a planHash: SHA-256 in hexadecimal.
const HashLen = 64

// whereHash says where a person finds the hash they meant.
const whereHash = "copy the hash from the planHash line (or the apply command) that the plan prints: run the same plan (or apply) without --plan-hash to see it"

// CheckHashForm refuses, with INVALID_INPUT, a reviewed hash that cannot be
// a planHash at all (not hexadecimal, too long): such a hash is a typo,
// never drift, and is caught before anything is planned. A short one waits
// for the plan (CheckReviewedHash), which can say whether it is a prefix.
func CheckHashForm(h string) error {
	for i := 0; i < len(h); i++ {
		if !isHex(h[i]) {
			return refusal.New(refusal.InvalidInput, "--plan-hash %q is not a plan hash: character %d (%q) is not a lowercase hexadecimal digit; a plan hash is %d of them; %s",
				clip(h), i+1, h[i], HashLen, whereHash)
		}
	}
	if len(h) > HashLen {
		return lengthError(h)
	}
	return nil
}

func lengthError(h string) error {
	return refusal.New(refusal.InvalidInput, "--plan-hash %q is not a plan hash: it has %d digits, a plan hash has %d (a shortened hash is not accepted: the apply is held to exactly the reviewed plan); %s",
		clip(h), len(h), HashLen, whereHash)
}

// CheckReviewedHash tells a mistyped reviewed hash from drift, once the plan
// of now is known. It answers nil when reviewed is now's hash or when the
// difference reads as drift (the fleet or the document moved since the plan
// was printed: a whole other hash); INVALID_INPUT when reviewed cannot be a
// plan hash, is a part of now's hash, or differs from it in so few digits
// that it was mistyped (two hashes of distinct plans share, by chance, about
// 4 of their 64 digits in place, almost never 60).
func CheckReviewedHash(reviewed, now string) error {
	if reviewed == "" || reviewed == now {
		return nil
	}
	if len(reviewed) < len(now) && len(reviewed) >= 4 && now[:len(reviewed)] == reviewed {
		return refusal.New(refusal.InvalidInput, "--plan-hash %s is the first %d digits of the plan's hash, not the whole of it: pass all %d digits (the plan of now has %s; check the plan before you apply it)",
			reviewed, len(reviewed), HashLen, now)
	}
	if err := CheckHashForm(reviewed); err != nil {
		return err
	}
	if len(reviewed) != HashLen {
		return lengthError(reviewed)
	}
	if n := differing(reviewed, now); n <= maxTypos {
		return refusal.New(refusal.InvalidInput, "--plan-hash %s differs from the hash of the plan of now (%s) in %d digit(s) only: it was mistyped, not moved; %s",
			reviewed, now, n, whereHash)
	}
	return nil
}

// maxTypos is how many digits in place a hash may differ in and still be
// read as a typo of the plan's hash.
const maxTypos = 4

func differing(a, b string) int {
	n := 0
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

// clip keeps an echoed flag value to a line's worth.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
