// Command stopwatch times whole processes for bench/startup.sh: each case
// is run many times, in rounds that run every case once, and each is
// reported by its fastest and its median wall time, its median CPU time
// (user plus system), and its ratio to another case, its floor: the median
// over the rounds of the ratio between the two runs of one round. A case
// and its floor run moments apart, so a busy spell of a shared machine
// falls on both; the paired ratio stays steady where the times themselves
// swing.
//
//	stopwatch [-runs N] 'NAME|FLOOR|GOAL|COMMAND ARGS...' ...
//
// FLOOR names another case (empty for a floor itself); GOAL is the largest
// ratio allowed (empty for none). Arguments are split at spaces. It exits
// 1 when a wall-time ratio is over its goal.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

type timing struct{ wall, cpu time.Duration }

type benchCase struct {
	name, floor string
	goal        float64 // 0: none
	argv        []string
	runs        []timing
}

func main() {
	runs := flag.Int("runs", 30, "runs of each case")
	warmup := flag.Int("warmup", 3, "runs of each case before measuring (page cache, CPU frequency)")
	flag.Parse()
	cases, err := parse(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "stopwatch:", err)
		os.Exit(2)
	}
	for i := range *warmup + *runs {
		for _, c := range cases {
			t, err := run(c.argv)
			if err != nil {
				fmt.Fprintf(os.Stderr, "stopwatch: %s: %v\n", c.name, err)
				os.Exit(1)
			}
			if i >= *warmup {
				c.runs = append(c.runs, t)
			}
		}
	}
	if !report(os.Stdout, cases, *runs) {
		os.Exit(1)
	}
}

func parse(args []string) ([]*benchCase, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("no cases; give 'NAME|FLOOR|GOAL|COMMAND ARGS...'")
	}
	var cases []*benchCase
	byName := map[string]bool{}
	for _, a := range args {
		f := strings.SplitN(a, "|", 4)
		if len(f) != 4 || f[0] == "" || strings.TrimSpace(f[3]) == "" {
			return nil, fmt.Errorf("case %q: want NAME|FLOOR|GOAL|COMMAND", a)
		}
		c := &benchCase{name: f[0], floor: f[1], argv: strings.Fields(f[3])}
		if f[2] != "" {
			g, err := strconv.ParseFloat(f[2], 64)
			if err != nil || g <= 0 {
				return nil, fmt.Errorf("case %q: goal %q is not a positive number", f[0], f[2])
			}
			c.goal = g
		}
		byName[c.name] = true
		cases = append(cases, c)
	}
	for _, c := range cases {
		if c.floor != "" && !byName[c.floor] {
			return nil, fmt.Errorf("case %q: no case named %q for its floor", c.name, c.floor)
		}
	}
	return cases, nil
}

// run starts argv once, its output thrown away, and times it. A command
// that fails is an error: a refusal would time the wrong work.
func run(argv []string) (timing, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil {
		return timing{}, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	st := cmd.ProcessState
	return timing{wall: wall, cpu: st.UserTime() + st.SystemTime()}, nil
}

func median(ts []timing, of func(timing) time.Duration) time.Duration {
	d := sorted(ts, of)
	if n := len(d); n%2 == 0 {
		return (d[n/2-1] + d[n/2]) / 2
	}
	return d[len(d)/2]
}

func best(ts []timing, of func(timing) time.Duration) time.Duration { return sorted(ts, of)[0] }

func sorted(ts []timing, of func(timing) time.Duration) []time.Duration {
	d := make([]time.Duration, len(ts))
	for i, t := range ts {
		d[i] = of(t)
	}
	slices.Sort(d)
	return d
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// pairedRatio is the median over rounds of c's time over f's.
func pairedRatio(c, f *benchCase, of func(timing) time.Duration) float64 {
	r := make([]float64, len(c.runs))
	for i := range c.runs {
		r[i] = float64(of(c.runs[i])) / float64(of(f.runs[i]))
	}
	slices.Sort(r)
	if n := len(r); n%2 == 0 {
		return (r[n/2-1] + r[n/2]) / 2
	}
	return r[len(r)/2]
}

// report prints one line per case and says whether every goal was met.
func report(w *os.File, cases []*benchCase, runs int) bool {
	wall := func(t timing) time.Duration { return t.wall }
	cpu := func(t timing) time.Duration { return t.cpu }
	byName := map[string]*benchCase{}
	for _, c := range cases {
		byName[c.name] = c
	}
	ok := true
	fmt.Fprintf(w, "%d rounds; ratio to the floor: median over rounds of wall time (of cpu time)\n", runs)
	fmt.Fprintf(w, "%-17s %9s %9s %9s\n", "case", "fastest", "median", "cpu")
	for _, c := range cases {
		line := fmt.Sprintf("%-17s %9s %9s %9s", c.name, ms(best(c.runs, wall)), ms(median(c.runs, wall)), ms(median(c.runs, cpu)))
		if c.floor != "" {
			f := byName[c.floor]
			r := pairedRatio(c, f, wall)
			line += fmt.Sprintf("  %.2fx %s (cpu %.2fx)", r, c.floor, pairedRatio(c, f, cpu))
			if c.goal > 0 {
				verdict := "ok"
				if r > c.goal {
					verdict, ok = "OVER", false
				}
				line += fmt.Sprintf("  goal %gx: %s", c.goal, verdict)
			}
		}
		fmt.Fprintln(w, line)
	}
	return ok
}
