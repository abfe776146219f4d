package docgen

import (
	"reflect"
	"strings"
	"testing"
)

func TestCommands(t *testing.T) {
	cases := []struct {
		name  string
		block string
		want  []ShellCommand
		err   string
	}{
		{"words and a comment", "make demo   # builds it\n", []ShellCommand{{Line: 1, Args: []string{"make", "demo"}}}, ""},
		{"lists and pipes", "make build && sudo make install; a | b || c &\n",
			[]ShellCommand{{Line: 1, Args: []string{"make", "build"}}, {Line: 1, Args: []string{"sudo", "make", "install"}},
				{Line: 1, Args: []string{"a"}}, {Line: 1, Args: []string{"b"}}, {Line: 1, Args: []string{"c"}}}, ""},
		{"quotes", `fleet-agent edit pool gpu gpuModel='"L4"' "a b" c\ d` + "\n",
			[]ShellCommand{{Line: 1, Args: []string{"fleet-agent", "edit", "pool", "gpu", `gpuModel="L4"`, "a b", "c d"}}}, ""},
		{"assignments", "export PATH=\"$PWD/bin:$PATH\" X=1\nFLEET_AGENT_CONFIG=c.yaml fleet-agent status\n",
			[]ShellCommand{{Line: 1, Args: []string{"export", "PATH=$PWD/bin:$PATH", "X=1"}},
				{Line: 2, Env: []string{"FLEET_AGENT_CONFIG=c.yaml"}, Args: []string{"fleet-agent", "status"}}}, ""},
		{"redirections", "fleet-agent schema > s.json\nprintf %s x | sudo tee f >/dev/null\nrun > log 2>&1 &\n",
			[]ShellCommand{{Line: 1, Args: []string{"fleet-agent", "schema"}, Out: []string{"s.json"}},
				{Line: 2, Args: []string{"printf", "%s", "x"}}, {Line: 2, Args: []string{"sudo", "tee", "f"}, Out: []string{"/dev/null"}},
				{Line: 3, Args: []string{"run"}, Out: []string{"log"}}}, ""},
		{"a placeholder in angle brackets does not paste", "apply --plan-hash <hash printed>\n", nil, "a redirection > without a file"},
		{"an input redirection", "apply --plan-hash <hash\n",
			[]ShellCommand{{Line: 1, Args: []string{"apply", "--plan-hash"}, In: []string{"hash"}}}, ""},
		{"a here-document", "cat > f.json <<'EOF'\n{ \"version\": 1 }\nEOF\nnext\n",
			[]ShellCommand{{Line: 1, Args: []string{"cat"}, Out: []string{"f.json"}, Heredoc: "{ \"version\": 1 }\n"}, {Line: 4, Args: []string{"next"}}}, ""},
		{"a substitution", `H=$(fleet-agent plan --commit "$TIP" | sed -n 's/^planHash //p')` + "\n",
			[]ShellCommand{{Line: 1, Env: []string{`H=$(fleet-agent plan --commit "$TIP" | sed -n 's/^planHash //p')`},
				Subs: []string{`fleet-agent plan --commit "$TIP" | sed -n 's/^planHash //p'`}}}, ""},
		{"a continuation", "a \\\n  b\n", []ShellCommand{{Line: 1, Args: []string{"a", "b"}}}, ""},
		{"an open quote", "echo 'x\n", nil, "unterminated '"},
		{"an open here-document", "cat <<EOF\nx\n", nil, "not closed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Commands(c.block)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %#v, %v\nwant %#v", got, err, c.want)
			}
		})
	}
}

func TestFencedDedents(t *testing.T) {
	text := "1. step\n\n   ```sh\n   cat <<EOF\n   x\n   EOF\n   ```\n\n```json\n{}\n```\n"
	if got := Fenced(text, "sh"); len(got) != 1 || got[0] != "cat <<EOF\nx\nEOF\n" {
		t.Fatalf("%q", got)
	}
	if got := Fenced(text, "json"); len(got) != 1 || got[0] != "{}\n" {
		t.Fatalf("%q", got)
	}
}
