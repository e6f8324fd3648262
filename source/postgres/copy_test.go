package postgres

import (
	"bytes"
	"errors"
	"testing"
)

// escape is COPY's text-format encoding of one field, as PostgreSQL writes it.
func escape(s []byte) []byte {
	var b []byte
	for _, c := range s {
		switch c {
		case '\\':
			b = append(b, `\\`...)
		case '\b':
			b = append(b, `\b`...)
		case '\f':
			b = append(b, `\f`...)
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		case '\t':
			b = append(b, `\t`...)
		case '\v':
			b = append(b, `\v`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

func decodeAll(t testing.TB, in []byte, chunk int) ([]string, error) {
	var got []string
	d := &copyDecoder{fn: func(k []byte) error { got = append(got, string(k)); return nil }}
	for len(in) > 0 {
		c := min(chunk, len(in))
		if _, err := d.Write(in[:c]); err != nil {
			return got, err
		}
		in = in[c:]
	}
	return got, d.finish()
}

func TestCopyDecoder(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []string
		err  error
	}{
		{"plain", "a\nb\n", []string{"a", "b"}, nil},
		{"empty key", "\n", []string{""}, nil},
		{"null skipped", "a\n\\N\nb\n", []string{"a", "b"}, nil},
		{"escapes", `t\tn\nr\rb\bf\fv\v\\x` + "\n", []string{"t\tn\nr\rb\bf\fv\v\\x"}, nil},
		{"octal and hex", `\101\x42\x4a\7` + "\n", []string{"ABJ\a"}, nil},
		{"bare x", `\xz` + "\n", []string{"xz"}, nil},
		{"other escaped", `\.\a` + "\n", []string{".a"}, nil},
		{"two columns", "a\tb\n", nil, ErrCopyFormat},
		{"two columns escaped", "a\\n\tb\n", nil, ErrCopyFormat},
		{"trailing backslash", "a\\\n", nil, ErrCopyFormat},
		{"N inside", "a\\Nb\n", nil, ErrCopyFormat},
		{"unterminated", "a\nb", []string{"a"}, ErrCopyFormat},
	} {
		for _, chunk := range []int{1, 2, 3, 1 << 20} {
			got, err := decodeAll(t, []byte(tc.in), chunk)
			if !errors.Is(err, tc.err) || (tc.err == nil && !equal(got, tc.want)) {
				t.Errorf("%s (chunk %d): got %q, %v; want %q, %v", tc.name, chunk, got, err, tc.want, tc.err)
			}
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzCopyDecoder: arbitrary bytes never panic; and any key, escaped as
// PostgreSQL escapes it, decodes back to itself however the stream is split.
func FuzzCopyDecoder(f *testing.F) {
	f.Add([]byte("plain@example.com"), []byte("a\tb\n\\N\n"), 3)
	f.Add([]byte("tab\there\\"), []byte(`\101\x4`), 1)
	f.Add([]byte{0xff, 0, '\n'}, []byte("\\"), 7)
	f.Fuzz(func(t *testing.T, key, raw []byte, chunk int) {
		if chunk <= 0 || chunk > 1<<16 {
			chunk = 1 + (chunk&0xffff)%64
			if chunk <= 0 {
				chunk = 1
			}
		}
		decodeAll(t, raw, chunk) // must not panic
		enc := append(escape(key), '\n')
		if bytes.Equal(enc, []byte("\\N\n")) {
			return
		}
		got, err := decodeAll(t, enc, chunk)
		if err != nil || len(got) != 1 || got[0] != string(key) {
			t.Fatalf("key %q encoded %q decoded to %q, %v", key, enc, got, err)
		}
	})
}
