package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// escapeControl writes every control character of s but newline and tab as a
// Go escape (\x1b, \u009b), and every byte that is not UTF-8 as \xNN. Status
// messages carry text from elsewhere — the tail of a failing setup command's
// output, an error Vercel returned — and printed raw an escape sequence in it
// could retitle or clear the terminal, move the cursor over what was printed
// before, or (in some terminals) answer back as typed input.
func escapeControl(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case !mustEscape(r, size):
			b.WriteString(s[i : i+size])
		case r == utf8.RuneError:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default: // C1 controls: \u009b is a CSI too
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	return b.String()
}

// needsEscape reports whether escapeControl would change s.
func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if mustEscape(r, size) {
			return true
		}
		i += size
	}
	return false
}

// mustEscape reports whether the rune r, size bytes long in the text, is
// escaped: a byte that is not UTF-8 (RuneError of size 1), a C0 control
// but newline and tab, DEL, or a C1 control.
func mustEscape(r rune, size int) bool {
	return (r == utf8.RuneError && size == 1) || (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r < 0xa0)
}

// escapingWriter escapes what is written to it as escapeControl does: the
// human-readable output (status, ls, tree) goes through one. The streams of
// exec, shell and cp, and -o json|yaml (which escape by their own rules),
// do not.
type escapingWriter struct{ w io.Writer }

func (e escapingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(e.w, escapeControl(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
