package gatewayconfig

import (
	"fmt"
	"strings"
)

// Section is a parsed strongSwan settings section (swanctl.conf, strongswan.conf): keys
// and subsections in file order. The agent turns swanctl.conf into VICI messages through
// it, and the fuzz test uses it to prove rendered files have exactly the expected shape.
type Section struct {
	Name     string
	Keys     []KeyValue
	Sections []*Section
}

// KeyValue is one `key = value` line; Value has quotes and escapes removed.
type KeyValue struct {
	Key   string
	Value string
}

// Get returns the value of key and whether it was present.
func (s *Section) Get(key string) (string, bool) {
	for _, kv := range s.Keys {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return "", false
}

// Sub returns the subsection called name, or nil.
func (s *Section) Sub(name string) *Section {
	for _, c := range s.Sections {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Paths lists every key and section of the tree as dotted paths, in file order.
func (s *Section) Paths() []string {
	var out []string
	var walk func(prefix string, sec *Section)
	walk = func(prefix string, sec *Section) {
		for _, kv := range sec.Keys {
			out = append(out, prefix+kv.Key)
		}
		for _, c := range sec.Sections {
			out = append(out, prefix+c.Name+"{}")
			walk(prefix+c.Name+".", c)
		}
	}
	walk("", s)
	return out
}

// ParseSettings parses the subset of the strongSwan settings syntax the renderers emit
// and swanctl accepts: `name {`, `}`, `key = value`, `key = "quoted \" value"`, and `#`
// comments. Include statements and multi-line values are refused.
func ParseSettings(text string) (*Section, error) {
	root := &Section{}
	stack := []*Section{root}
	for n, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cur := stack[len(stack)-1]
		switch {
		case line == "}":
			if len(stack) == 1 {
				return nil, fmt.Errorf("line %d: unbalanced }", n+1)
			}
			stack = stack[:len(stack)-1]
		case strings.HasSuffix(line, "{") && !strings.Contains(line, "="):
			name := strings.TrimSpace(strings.TrimSuffix(line, "{"))
			if !isSettingsName(name) {
				return nil, fmt.Errorf("line %d: bad section name %q", n+1, name)
			}
			sec := &Section{Name: name}
			cur.Sections = append(cur.Sections, sec)
			stack = append(stack, sec)
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				return nil, fmt.Errorf("line %d: expected key = value", n+1)
			}
			k = strings.TrimSpace(k)
			if !isSettingsName(k) {
				return nil, fmt.Errorf("line %d: bad key %q", n+1, k)
			}
			val, err := unquoteValue(strings.TrimSpace(v))
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", n+1, err)
			}
			cur.Keys = append(cur.Keys, KeyValue{Key: k, Value: val})
		}
	}
	if len(stack) != 1 {
		return nil, fmt.Errorf("unterminated section %q", stack[len(stack)-1].Name)
	}
	return root, nil
}

func isSettingsName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

func unquoteValue(v string) (string, error) {
	if !strings.HasPrefix(v, `"`) {
		if i := strings.IndexByte(v, '#'); i >= 0 {
			v = strings.TrimSpace(v[:i])
		}
		if strings.ContainsAny(v, "{}\"") {
			return "", fmt.Errorf("unquoted value %q contains syntax characters", v)
		}
		return v, nil
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch c {
		case '\\':
			if i+1 >= len(v) {
				return "", fmt.Errorf("dangling escape")
			}
			i++
			b.WriteByte(v[i])
		case '"':
			rest := strings.TrimSpace(v[i+1:])
			if rest != "" && !strings.HasPrefix(rest, "#") {
				return "", fmt.Errorf("text after closing quote: %q", rest)
			}
			return b.String(), nil
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("unterminated quoted value")
}

// quote renders v as a quoted settings value. Callers only pass validated values; the
// escaping is a second line of defence.
func quote(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(v) + `"`
}
