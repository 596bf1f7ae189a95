package migrate

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// conn is one IKE connection read from either format, with the settings as written
// (keys in the file's own notation) so the report can name each one exactly.
type conn struct {
	name string
	// where names the connection in the report: "connections.hq" or "conn hq".
	where string
	// settings of the connection (swanctl keys of the connection section, or ipsec.conf
	// keys after %default and also= were applied).
	settings []setting
	local    []setting // swanctl local* sections (flattened, key "local.auth")
	remote   []setting
	children []child
	legacy   bool // ipsec.conf
}

type child struct {
	name     string
	settings []setting
}

type setting struct {
	key, value string
	// path is the setting's full name for the report.
	path string
}

func get(ss []setting, key string) (string, bool) {
	for _, s := range ss {
		if s.key == key {
			return s.value, true
		}
	}
	return "", false
}

// secret is one pre-shared key with the identities it is for (none: any).
type secret struct {
	ids   []string
	value []byte
	raw   string // as written (0s..., 0x... or plain), for the report's last check
	where string
}

// --- swanctl.conf

type section struct {
	name     string
	line     int
	keys     []setting
	sections []*section
}

func (s *section) sub(name string) *section {
	for _, c := range s.sections {
		if c.name == name {
			return c
		}
	}
	return nil
}

// parseSwanctl reads swanctl.conf's settings syntax: `name {`, `}`, `key = value` (quoted
// or not, a quoted value may continue over lines), `#` comments. Lines it cannot read, and
// include statements, are returned as problems rather than guessed at. A problem names
// the line by its number only: the line may be part of a key (a secret continued over
// lines, a stray brace in a secret), and the report must never show key material.
func parseSwanctl(text string) (*section, []string) {
	root := &section{}
	stack := []*section{root}
	opened := []int{0} // line each open section started on
	var problems []string
	path := func() string {
		var p []string
		for _, s := range stack[1:] {
			p = append(p, s.name)
		}
		return strings.Join(p, ".")
	}
	inSecrets := func() bool {
		for _, s := range stack[1:] {
			if s.name == "secrets" {
				return true
			}
		}
		return false
	}
	lines := strings.Split(text, "\n")
	for n := 0; n < len(lines); n++ {
		line := strings.TrimSpace(stripComment(lines[n]))
		at := n + 1
		for line != "" {
			cur := stack[len(stack)-1]
			switch {
			case strings.HasPrefix(line, "}"):
				if len(stack) > 1 {
					stack, opened = stack[:len(stack)-1], opened[:len(opened)-1]
				} else {
					problems = append(problems, fmt.Sprintf("line %d: unbalanced }", at))
				}
				line = strings.TrimSpace(line[1:])
			case strings.HasPrefix(line, "include "):
				if inSecrets() {
					problems = append(problems, fmt.Sprintf("line %d: an include in the secrets section: included files are not read; pass their content in the file", at))
				} else {
					problems = append(problems, fmt.Sprintf("line %d: %q: included files are not read; pass their content in the file", at, line))
				}
				line = ""
			default:
				eq := strings.Index(line, "=")
				br := strings.Index(line, "{")
				if br >= 0 && (eq < 0 || br < eq) {
					name := strings.TrimSpace(line[:br])
					sec := &section{name: name, line: at}
					cur.sections = append(cur.sections, sec)
					stack, opened = append(stack, sec), append(opened, at)
					line = strings.TrimSpace(line[br+1:])
					continue
				}
				k := strings.TrimSpace(line[:max(eq, 0)])
				if eq < 0 || !reKey.MatchString(k) {
					problems = append(problems, fmt.Sprintf("line %d: cannot read the line (not shown: it may hold key material)", at))
					line = ""
					continue
				}
				valueText := strings.TrimSpace(line[eq+1:])
				// A quoted value left open continues on the next lines, as in
				// strongSwan's own parser; read them raw (a # there is part of it).
				for strings.HasPrefix(valueText, `"`) && !closedQuote(valueText) && n+1 < len(lines) {
					n++
					valueText += "\n" + lines[n]
				}
				v, rest := readValue(valueText)
				p := path()
				if p != "" {
					p += "."
				}
				cur.keys = append(cur.keys, setting{key: k, value: v, path: p + k})
				line = rest
			}
		}
	}
	if len(stack) > 1 {
		problems = append(problems, fmt.Sprintf("the section opened at line %d is not closed", opened[1]))
	}
	return root, problems
}

// reKey is a setting name of either format; anything else on the left of an = is not a
// setting (a secret continued over lines, an ipsec.secrets entry in the wrong file).
var reKey = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)

// closedQuote tells whether s, which starts with a quote, holds its closing quote.
func closedQuote(s string) bool {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return true
		}
	}
	return false
}

// readValue reads a value up to the end of the line or a closing brace; a quoted value
// may contain anything but an unescaped quote.
func readValue(s string) (string, string) {
	if strings.HasPrefix(s, `"`) {
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			switch s[i] {
			case '\\':
				if i+1 < len(s) {
					i++
					b.WriteByte(s[i])
				}
			case '"':
				return b.String(), strings.TrimSpace(s[i+1:])
			default:
				b.WriteByte(s[i])
			}
		}
		return b.String(), ""
	}
	if i := strings.Index(s, "}"); i >= 0 {
		return strings.TrimSpace(s[:i]), strings.TrimSpace(s[i:])
	}
	return strings.TrimSpace(s), ""
}

// stripComment removes a # comment that is not inside quotes.
func stripComment(s string) string {
	in := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			in = !in
		case '#':
			if !in {
				return s[:i]
			}
		}
	}
	return s
}

func swanctlConns(root *section) []conn {
	cs := root.sub("connections")
	if cs == nil {
		return nil
	}
	var out []conn
	for _, s := range cs.sections {
		c := conn{name: s.name, where: "connections." + s.name, settings: s.keys}
		for _, sub := range s.sections {
			switch {
			case strings.HasPrefix(sub.name, "local"):
				c.local = append(c.local, flatten(sub, sub.name)...)
			case strings.HasPrefix(sub.name, "remote"):
				c.remote = append(c.remote, flatten(sub, sub.name)...)
			case sub.name == "children":
				for _, ch := range sub.sections {
					c.children = append(c.children, child{name: ch.name, settings: flatten(ch, "")})
				}
			default:
				c.settings = append(c.settings, flatten(sub, sub.name)...)
			}
		}
		out = append(out, c)
	}
	return out
}

// flatten lists a section's keys with subsection keys as "sub.key".
func flatten(s *section, prefix string) []setting {
	var out []setting
	for _, k := range s.keys {
		key := k.key
		if prefix != "" && (strings.HasPrefix(prefix, "local") || strings.HasPrefix(prefix, "remote")) {
			key = prefix + "." + k.key
		}
		out = append(out, setting{key: key, value: k.value, path: k.path})
	}
	for _, sub := range s.sections {
		p := sub.name
		if prefix != "" {
			p = prefix + "." + sub.name
		}
		out = append(out, flatten(sub, p)...)
	}
	return out
}

func swanctlSecrets(root *section) []secret {
	ss := root.sub("secrets")
	if ss == nil {
		return nil
	}
	var out []secret
	for _, s := range ss.sections {
		if !strings.HasPrefix(s.name, "ike") {
			continue
		}
		sec := secret{where: "secrets." + s.name}
		for _, k := range s.keys {
			switch {
			case strings.HasPrefix(k.key, "id"):
				sec.ids = append(sec.ids, strings.TrimPrefix(k.value, "@"))
			case k.key == "secret":
				sec.value, sec.raw = decodeSecret(k.value), k.value
			}
		}
		if len(sec.value) > 0 {
			out = append(out, sec)
		}
	}
	return out
}

func decodeSecret(v string) []byte {
	switch {
	case strings.HasPrefix(v, "0s"):
		if b, err := base64.StdEncoding.DecodeString(v[2:]); err == nil {
			return b
		}
	case strings.HasPrefix(v, "0x"):
		if b, err := hex.DecodeString(v[2:]); err == nil {
			return b
		}
	}
	return []byte(v)
}

// --- ipsec.conf

// parseIPsecConf reads the legacy ipsec.conf: `conn <name>` sections with indented
// key=value lines, `conn %default` applied to every connection and `also=` included,
// as strongSwan's starter does. `config setup` and `ca` sections are skipped.
func parseIPsecConf(text string) ([]conn, []string) {
	type raw struct {
		name string
		kv   []setting
	}
	var sections []*raw
	var cur *raw
	var problems []string
	skip := false
	for n, line := range strings.Split(text, "\n") {
		body := strings.TrimRight(stripComment(line), " \t\r")
		if strings.TrimSpace(body) == "" {
			continue
		}
		indented := body[0] == ' ' || body[0] == '\t'
		t := strings.TrimSpace(body)
		if !indented {
			f := strings.Fields(t)
			switch {
			case f[0] == "conn" && len(f) == 2:
				cur, skip = &raw{name: f[1]}, false
				sections = append(sections, cur)
			case f[0] == "config" || f[0] == "ca":
				cur, skip = nil, true
			case f[0] == "include":
				problems = append(problems, fmt.Sprintf("line %d: %q: included files are not read; pass their content in the file", n+1, t))
			case f[0] == "version":
			default:
				problems = append(problems, fmt.Sprintf("line %d: cannot read the line (not shown: it may hold key material)", n+1))
			}
			continue
		}
		if skip {
			continue
		}
		if cur == nil {
			problems = append(problems, fmt.Sprintf("line %d: a setting outside a conn section (not shown: it may hold key material)", n+1))
			continue
		}
		k, v, ok := strings.Cut(t, "=")
		k = strings.TrimSpace(k)
		if !ok || !reKey.MatchString(k) {
			problems = append(problems, fmt.Sprintf("line %d: cannot read the line (not shown: it may hold key material)", n+1))
			continue
		}
		v, _ = readValue(strings.TrimSpace(v))
		cur.kv = append(cur.kv, setting{key: k, value: v})
	}
	byName := map[string]*raw{}
	for _, s := range sections {
		byName[s.name] = s
	}
	// expand resolves also= depth first; later settings override earlier ones, the
	// connection's own override what it includes, as the starter does.
	var expand func(s *raw, seen map[string]bool) []setting
	expand = func(s *raw, seen map[string]bool) []setting {
		var out []setting
		set := func(st setting) {
			for i := range out {
				if out[i].key == st.key {
					out[i] = st
					return
				}
			}
			out = append(out, st)
		}
		for _, kv := range s.kv {
			if kv.key != "also" {
				continue
			}
			inc := byName[kv.value]
			if inc == nil || seen[kv.value] {
				problems = append(problems, fmt.Sprintf("conn %s: also=%s names no (or a circular) conn section", s.name, kv.value))
				continue
			}
			seen[kv.value] = true
			for _, x := range expand(inc, seen) {
				// An included section's auto= stays with that section: templates
				// marked auto=ignore are not started, their includers are.
				if x.key != "auto" {
					set(x)
				}
			}
		}
		for _, kv := range s.kv {
			if kv.key != "also" {
				set(setting{key: kv.key, value: kv.value, path: "conn " + s.name + ": " + kv.key})
			}
		}
		return out
	}
	var defaults []setting
	if d := byName["%default"]; d != nil {
		defaults = expand(d, map[string]bool{"%default": true})
	}
	var out []conn
	for _, s := range sections {
		if s.name == "%default" {
			continue
		}
		merged := append([]setting(nil), defaults...)
		for _, x := range expand(s, map[string]bool{s.name: true}) {
			replaced := false
			for i := range merged {
				if merged[i].key == x.key {
					merged[i], replaced = x, true
				}
			}
			if !replaced {
				merged = append(merged, x)
			}
		}
		for i := range merged {
			if merged[i].path == "" || strings.HasPrefix(merged[i].path, "conn %default") {
				merged[i].path = "conn " + s.name + ": " + merged[i].key + " (from %default)"
			}
		}
		// A conn only included by others (auto=ignore without peers) is a template.
		if v, _ := get(merged, "auto"); v == "ignore" {
			continue
		}
		out = append(out, conn{name: s.name, where: "conn " + s.name, settings: merged, legacy: true})
	}
	return out, problems
}

// parseIPsecSecrets reads ipsec.secrets lines `[ids] : PSK "secret"`.
func parseIPsecSecrets(text string) ([]secret, []string) {
	var out []secret
	var problems []string
	for n, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(stripComment(line))
		if t == "" {
			continue
		}
		if strings.HasPrefix(t, "include") {
			problems = append(problems, fmt.Sprintf("ipsec.secrets line %d: included files are not read", n+1))
			continue
		}
		ids, rest, ok := strings.Cut(t, ":")
		if !ok {
			problems = append(problems, fmt.Sprintf("ipsec.secrets line %d: cannot read the entry", n+1))
			continue
		}
		f := strings.Fields(strings.TrimSpace(rest))
		if len(f) < 2 || f[0] != "PSK" {
			// RSA, ECDSA, EAP, XAUTH: not pre-shared keys, nothing to carry.
			continue
		}
		v, _ := readValue(strings.TrimSpace(strings.TrimSpace(rest)[3:]))
		var idl []string
		for _, id := range strings.Fields(ids) {
			idl = append(idl, strings.TrimPrefix(id, "@"))
		}
		out = append(out, secret{ids: idl, value: decodeSecret(v), raw: v, where: fmt.Sprintf("ipsec.secrets line %d", n+1)})
	}
	return out, problems
}
