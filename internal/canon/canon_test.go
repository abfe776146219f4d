package canon

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"
)

func TestFloatLikeECMAScript(t *testing.T) {
	// Expected strings are what ECMAScript's Number#toString prints; the
	// cases come from RFC 8785 appendix B and the layout boundaries.
	cases := []struct {
		in   float64
		want string
	}{
		{0, "0"},
		{math.Copysign(0, -1), "0"},
		{1, "1"},
		{-1.5, "-1.5"},
		{0.1, "0.1"},
		{1e21, "1e+21"},
		{1e20, "100000000000000000000"},
		{123456789012345680000, "123456789012345680000"},
		{1e-6, "0.000001"},
		{1e-7, "1e-7"},
		{4.5e-7, "4.5e-7"},
		{5e-324, "5e-324"},
		{1.7976931348623157e308, "1.7976931348623157e+308"},
		{9007199254740992, "9007199254740992"},
		{295147905179352830000, "295147905179352830000"},
		{0.000001, "0.000001"},
		{333333333.3333332, "333333333.3333332"},
	}
	for _, c := range cases {
		got, err := AppendFloat(nil, c.in)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.want {
			t.Errorf("AppendFloat(%v) = %s, want %s", c.in, got, c.want)
		}
	}
	if _, err := AppendFloat(nil, math.NaN()); err == nil {
		t.Error("NaN accepted")
	}
}

func TestMarshalSortsAndDoesNotEscapeHTML(t *testing.T) {
	type inner struct {
		Z string `json:"z"`
		A int    `json:"a,omitempty"`
	}
	v := map[string]any{
		"b":      []any{json.Number("2.0"), json.Number("1e2"), json.Number("0.5"), true, nil},
		"a":      "pool -> tenant <&>",
		"c":      inner{Z: "x"},
		"\u00e9": 1,
		"é2":     "\u2028\n\"",
	}
	got := string(MustMarshal(v))
	want := `{"a":"pool -> tenant <&>","b":[2,100,0.5,true,null],"c":{"z":"x"},"é":1,"é2":"` + "\u2028" + `\n\""}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestUTF16KeyOrder(t *testing.T) {
	// U+E000 sorts before U+1F600 in UTF-8 byte order and after it in
	// UTF-16 code units (surrogates are 0xD83D...), RFC 8785's order.
	got := string(MustMarshal(map[string]int{"\ue000": 1, "\U0001F600": 2}))
	want := `{"` + "\U0001F600" + `":2,"` + "\ue000" + `":1}`
	if got != want {
		t.Errorf("got %s want %s", got, want)
	}
}

// TestLargeIntegersAreDoubles: an int64 beyond 2^53 and the json.Number of
// the same value encode alike, as the double RFC 8785 makes of them.
func TestLargeIntegersAreDoubles(t *testing.T) {
	for _, v := range []int64{1<<53 + 1, -(1<<53 + 1), 1 << 62} {
		a := string(MustMarshal(v))
		b := string(MustMarshal(json.Number(strconv.FormatInt(v, 10))))
		if a != b {
			t.Errorf("%d: int64 %s, json.Number %s", v, a, b)
		}
	}
	if got := string(MustMarshal(int64(1<<53 - 1))); got != "9007199254740991" {
		t.Errorf("2^53-1 printed %s", got)
	}
}
