package postgres

import (
	"strconv"
	"strings"
)

// matchesSyncStandby reports whether synchronous_standby_names (as read
// with current_setting) could choose a standby named app as synchronous.
// The forms are PostgreSQL's (docs/operations.md, "WAL mode"): '*', a plain
// list, "FIRST n (list)", "ANY n (list)" and the old "n (list)"; a name
// may be double-quoted and matches case-insensitively, like PostgreSQL's
// own comparison; '*' in a list matches every name. A setting that does
// not parse matches: PostgreSQL would not accept it either, and refusing
// is the safe answer.
func matchesSyncStandby(setting, app string) bool {
	names, ok := parseSyncStandbyNames(setting)
	if !ok {
		return true
	}
	for _, n := range names {
		if n == "*" || strings.EqualFold(n, app) {
			return true
		}
	}
	return false
}

// parseSyncStandbyNames returns the standby names of a
// synchronous_standby_names value, false when it does not parse.
func parseSyncStandbyNames(s string) ([]string, bool) {
	toks, ok := syncStandbyTokens(s)
	if !ok {
		return nil, false
	}
	if len(toks) == 0 {
		return nil, true
	}
	i := 0
	if !toks[0].quoted && (strings.EqualFold(toks[0].text, "first") || strings.EqualFold(toks[0].text, "any")) &&
		len(toks) > 1 && isNumber(toks[1]) {
		i = 1
	}
	if isNumber(toks[i]) && len(toks) > i+1 && toks[i+1].punct('(') {
		// n (list)
		if len(toks) < i+3 || !toks[len(toks)-1].punct(')') {
			return nil, false
		}
		return syncStandbyList(toks[i+2 : len(toks)-1])
	}
	if i != 0 {
		return nil, false
	}
	return syncStandbyList(toks)
}

// syncStandbyList reads "name, name, ...".
func syncStandbyList(toks []syncToken) ([]string, bool) {
	var names []string
	for j, t := range toks {
		if j%2 == 1 {
			if !t.punct(',') {
				return nil, false
			}
			continue
		}
		if !t.quoted && (t.text == "," || t.text == "(" || t.text == ")") {
			return nil, false
		}
		names = append(names, t.text)
	}
	if len(toks) == 0 || len(toks)%2 == 0 {
		return nil, false
	}
	return names, true
}

type syncToken struct {
	text   string
	quoted bool
}

func (t syncToken) punct(c byte) bool { return !t.quoted && len(t.text) == 1 && t.text[0] == c }

func isNumber(t syncToken) bool {
	if t.quoted {
		return false
	}
	n, err := strconv.Atoi(t.text)
	return err == nil && n >= 0
}

// syncStandbyTokens splits a synchronous_standby_names value into names,
// numbers, quoted names and the punctuation ( ) , as PostgreSQL's scanner
// does: white space separates, "" inside quotes is a quote.
func syncStandbyTokens(s string) ([]syncToken, bool) {
	var toks []syncToken
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '(' || c == ')' || c == ',' || c == '*':
			toks = append(toks, syncToken{text: string(c)})
			i++
		case c == '"':
			var b strings.Builder
			i++
			for {
				if i >= len(s) {
					return nil, false // unterminated
				}
				if s[i] == '"' {
					if i+1 < len(s) && s[i+1] == '"' {
						b.WriteByte('"')
						i += 2
						continue
					}
					i++
					break
				}
				b.WriteByte(s[i])
				i++
			}
			toks = append(toks, syncToken{text: b.String(), quoted: true})
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\n\r\f\v(),\"*", rune(s[j])) {
				j++
			}
			toks = append(toks, syncToken{text: s[i:j]})
			i = j
		}
	}
	return toks, true
}
