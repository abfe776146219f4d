package docgen

import (
	"fmt"
	"strings"
)

// ShellCommand is one simple command of a shell block, as far as a test of the
// pages needs to know it: its words with the quotes removed (parameter
// expansions such as $HOME are kept as written), the files it redirects
// to and from, the body of its here-document and the commands substituted
// into its words by $(...).
type ShellCommand struct {
	// Line is the line of the block the command starts on, from 1.
	Line int
	// Env are the NAME=VALUE words before the command's name.
	Env  []string
	Args []string
	// Out are the files written by > and >> (not descriptors: 2>&1).
	Out []string
	// In are the files read by <.
	In      []string
	Heredoc string
	// Subs are the texts of the $(...) substitutions in its words.
	Subs []string
}

// Commands splits a shell block into its simple commands: lists (&&, ||,
// ;, &, newlines) and pipelines are cut into their commands, "\" at the
// end of a line continues it, "#" starts a comment, here-documents are
// read to their terminator. It knows the shell the pages use, not all of
// POSIX: an unterminated quote, substitution or here-document is an error.
func Commands(block string) ([]ShellCommand, error) {
	lines := strings.Split(block, "\n")
	var out []ShellCommand
	for i := 0; i < len(lines); i++ {
		start := i
		line := lines[i]
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, "\\") + " " + lines[i]
		}
		cmds, heredocs, err := scanLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", start+1, err)
		}
		for ci, term := range heredocs {
			var body strings.Builder
			closed := false
			for i+1 < len(lines) {
				i++
				if lines[i] == term {
					closed = true
					break
				}
				body.WriteString(lines[i] + "\n")
			}
			if !closed {
				return nil, fmt.Errorf("line %d: the here-document is not closed by a line %q", start+1, term)
			}
			cmds[ci].Heredoc = body.String()
		}
		for k := range cmds {
			cmds[k].Line = start + 1
			if len(cmds[k].Args) > 0 || len(cmds[k].Env) > 0 {
				out = append(out, cmds[k])
			}
		}
	}
	return out, nil
}

// scanLine scans one logical line; heredocs maps the index of a command
// in the returned list to its here-document's terminator.
func scanLine(line string) (cmds []ShellCommand, heredocs map[int]string, err error) {
	heredocs = map[int]string{}
	var cur ShellCommand
	var word strings.Builder
	inWord := false
	redirect := "" // the operator waiting for its word: ">", "<", "<<"
	flush := func() {
		if !inWord {
			return
		}
		w := word.String()
		word.Reset()
		inWord = false
		switch redirect {
		case ">":
			if !strings.HasPrefix(w, "&") {
				cur.Out = append(cur.Out, w)
			}
		case "<":
			cur.In = append(cur.In, w)
		case "<<":
			heredocs[len(cmds)] = w
		default:
			if len(cur.Args) == 0 && isAssignment(w) {
				cur.Env = append(cur.Env, w)
			} else {
				cur.Args = append(cur.Args, w)
			}
		}
		redirect = ""
	}
	end := func() {
		flush()
		cmds = append(cmds, cur)
		cur = ShellCommand{}
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
		case c == '#' && !inWord:
			i = len(line)
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, nil, fmt.Errorf("an unterminated ' quote")
			}
			word.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '"':
			inWord = true
			j := i + 1
			for ; j < len(line) && line[j] != '"'; j++ {
				switch {
				case line[j] == '\\' && j+1 < len(line) && strings.IndexByte("\"\\$`", line[j+1]) >= 0:
					j++
					word.WriteByte(line[j])
				case strings.HasPrefix(line[j:], "$("):
					sub, n, err := substitution(line[j:])
					if err != nil {
						return nil, nil, err
					}
					cur.Subs = append(cur.Subs, sub)
					word.WriteString(line[j : j+n])
					j += n - 1
				default:
					word.WriteByte(line[j])
				}
			}
			if j >= len(line) {
				return nil, nil, fmt.Errorf("an unterminated \" quote")
			}
			i = j
		case c == '\\' && i+1 < len(line):
			i++
			word.WriteByte(line[i])
			inWord = true
		case strings.HasPrefix(line[i:], "$("):
			sub, n, err := substitution(line[i:])
			if err != nil {
				return nil, nil, err
			}
			cur.Subs = append(cur.Subs, sub)
			word.WriteString(line[i : i+n])
			inWord = true
			i += n - 1
		case c == '&' && strings.HasPrefix(line[i:], "&&"), c == '|' && strings.HasPrefix(line[i:], "||"):
			end()
			i++
		case c == '&' && redirect == "" || c == '|' || c == ';':
			end()
		case c == '>':
			// "2>" and "&>": the descriptor is part of the operator.
			if inWord && isDigits(word.String()) {
				word.Reset()
				inWord = false
			}
			flush()
			redirect = ">"
			if strings.HasPrefix(line[i:], ">>") {
				i++
			}
		case c == '<':
			flush()
			redirect = "<"
			if strings.HasPrefix(line[i:], "<<") {
				redirect = "<<"
				i++
				if i+1 < len(line) && line[i+1] == '-' {
					i++
				}
			}
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if redirect != "" && !inWord {
		return nil, nil, fmt.Errorf("a redirection %s without a file", redirect)
	}
	end()
	return cmds, heredocs, nil
}

// substitution returns the command inside a "$(...)" at the start of s and
// the length of the whole.
func substitution(s string) (string, int, error) {
	depth := 0
	quote := byte(0)
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				return s[2:i], i + 1, nil
			}
		}
	}
	return "", 0, fmt.Errorf("an unterminated $( substitution")
}

func isAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	if !ok || name == "" {
		return false
	}
	for i, c := range name {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
