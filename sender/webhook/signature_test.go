package webhook

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"order":42}`)
	now := time.Unix(1_800_000_000, 0)
	good := Sign("s1", now, body)
	other := Sign("s2", now, body)
	_, otherSig, _ := strings.Cut(other, ",")
	cases := []struct {
		name      string
		secret    string
		header    string
		body      []byte
		tolerance time.Duration
		at        time.Time
		want      error
	}{
		{"valid", "s1", good, body, time.Minute, now, nil},
		{"valid at the edge of the past", "s1", good, body, time.Minute, now.Add(time.Minute), nil},
		{"valid at the edge of the future", "s1", good, body, time.Minute, now.Add(-time.Minute), nil},
		{"too old", "s1", good, body, time.Minute, now.Add(time.Minute + time.Second), ErrSignatureExpired},
		{"from the future", "s1", good, body, time.Minute, now.Add(-time.Minute - time.Second), ErrSignatureExpired},
		{"wrong secret", "s2", good, body, time.Minute, now, ErrSignatureMismatch},
		{"tampered body", "s1", good, []byte(`{"order":43}`), time.Minute, now, ErrSignatureMismatch},
		{"tampered timestamp", "s1", strings.Replace(good, "t=1800000000", "t=1800000001", 1), body, time.Minute, now, ErrSignatureMismatch},
		{"rotation: second v1 matches", "s2", good + "," + otherSig, body, time.Minute, now, nil},
		{"unknown scheme ignored", "s1", good + ",v9=zz", body, time.Minute, now, nil},
		{"spaces tolerated", "s1", strings.ReplaceAll(good, ",", ", "), body, time.Minute, now, nil},
		{"missing", "s1", "", body, time.Minute, now, ErrSignatureMissing},
		{"no timestamp", "s1", good[strings.Index(good, ",")+1:], body, time.Minute, now, ErrSignatureMalformed},
		{"no v1", "s1", "t=1800000000", body, time.Minute, now, ErrSignatureMalformed},
		{"two timestamps", "s1", "t=1," + good, body, time.Minute, now, ErrSignatureMalformed},
		{"bad hex", "s1", "t=1800000000,v1=xyz", body, time.Minute, now, ErrSignatureMalformed},
		{"short mac", "s1", "t=1800000000,v1=abcd", body, time.Minute, now, ErrSignatureMalformed},
		{"negative time", "s1", "t=-5,v1=" + strings.Repeat("00", 32), body, time.Minute, now, ErrSignatureMalformed},
		{"garbage", "s1", "hello", body, time.Minute, now, ErrSignatureMalformed},
	}
	for _, c := range cases {
		if err := verifyAt(c.secret, c.header, c.body, c.tolerance, c.at); !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("%s: verify = %v, want %v", c.name, err, c.want)
		}
	}
	var ce *ConfigError
	if err := Verify("", good, body, time.Minute); !errors.As(err, &ce) {
		t.Errorf("empty secret: %v, want a ConfigError", err)
	}
	if err := Verify("s1", good, body, 0); !errors.As(err, &ce) {
		t.Errorf("zero tolerance: %v, want a ConfigError", err)
	}
}

func FuzzVerify(f *testing.F) {
	body := []byte("body")
	f.Add(Sign("k", time.Unix(1_800_000_000, 0), body), body)
	f.Add("t=1,v1=00", body)
	f.Add("t=,v1=", []byte{})
	f.Add(",,,=,=", []byte{0})
	now := time.Unix(1_800_000_000, 0)
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		if verifyAt("k", header, body, time.Hour, now) != nil {
			return
		}
		// Accepted: the header must hold the real MAC of its own
		// timestamp and this body (hex in any case).
		var ts string
		var sigs []string
		for _, part := range strings.Split(header, ",") {
			k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
			switch k {
			case "t":
				ts = v
			case "v1":
				sigs = append(sigs, strings.ToLower(v))
			}
		}
		want := hex.EncodeToString(mac([]byte("k"), ts, body))
		for _, s := range sigs {
			if s == want {
				return
			}
		}
		t.Fatalf("accepted %q for body %q without its MAC", header, body)
	})
}
