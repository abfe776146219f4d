package plan

import (
	"strings"
	"unicode"
)

// EscapeMarkdown is s as text in markdown: whatever it holds reads as the
// characters it is, never as markup. A policy's rule messages, names and
// notes are written by whoever writes the policy (a pull request may
// propose one), and the agent's comments and check runs are trusted by
// their readers, so nothing of them may become a heading, a link, an
// image, HTML, a code fence or a mention.
//
// The characters inline markup is made of (\ ` * _ [ ] < > & ~ | !) are
// escaped with a backslash, so markdown shows them as they are; line
// breaks and other control characters become spaces, so that no block (a
// heading, a list, a quote, a fence) can start; and an @ or # is followed
// by a zero width space, so that GitHub neither notifies a user or team nor
// links an issue. Other punctuation is left as it is: mid-line it is text.
func EscapeMarkdown(s string) string {
	var b strings.Builder
	b.Grow(len(s) + len(s)/4)
	for _, r := range s {
		switch {
		case r == '@' || r == '#':
			b.WriteRune(r)
			b.WriteRune('\u200b')
		case strings.ContainsRune("\\`*_[]<>&~|!", r):
			b.WriteByte('\\')
			b.WriteRune(r)
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029':
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// codeText is s in a code span: a run of backticks longer than any in s
// fences it, and line breaks become spaces.
func codeText(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, s)
	longest, run := 0, 0
	for _, r := range s {
		if r == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", longest+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") || longest > 0 {
		return fence + " " + s + " " + fence
	}
	return fence + s + fence
}
