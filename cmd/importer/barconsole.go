package main

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// barConsole is mpb's ConsoleWriter on a terminal: it draws each frame
// over the last one, and tells mpb the width a frame's lines may take.
// mpb's own (cupwriter) moves the cursor up over the last frame and clears
// below it, keeping the cursor's column; anything the terminal echoed in
// between (the ^C of a Ctrl-C) moved that column, so the new frame was
// drawn that many columns to the right, wrapped, and left the old frame's
// first letters before it ("WrFailed [==>--] 10.5% 3.0 MiB / 19.1 MiB
// 1.0 MiB" and "/s" on the next line, at 80 and 120 columns). A frame
// here starts at the first column: a carriage return comes first.
//
// The width given to mpb is the terminal's less one column: a line that
// reaches the last column wraps at once on a terminal without the
// deferred wrap of xterm's and tmux's, and the cursor-up count would miss
// that line. mpb reads the width before every frame, so a resized
// terminal (SIGWINCH) gets frames of its new width from the next one on.
// The frame drawn before a terminal was made narrower is rewrapped by the
// terminal, and its first row may stay above the new frames (tmux: counting
// the rewrapped rows instead made every later frame a new line, measured).
type barConsole struct {
	bytes.Buffer
	out *os.File
	// last is how many lines of bars the last frame drew.
	last int
}

func newBarConsole(out *os.File) *barConsole { return &barConsole{out: out} }

func (c *barConsole) IsTerminal() bool { return true }

// GetTermSize is the terminal's size, one column less (see barConsole).
func (c *barConsole) GetTermSize() (width, height int, err error) {
	cols, rows, err := terminalSize(c.out)
	if err != nil {
		return 0, 0, err
	}
	return max(cols-1, 1), rows, nil
}

// Flush draws the frame buffered since the last one (log lines written
// through mpb, then the bars, each line ending in a newline) over the
// last frame's bars. lines is how many lines of it are bars, to be drawn
// over by the next frame.
func (c *barConsole) Flush(lines int) error {
	var head []byte
	if c.last > 0 {
		head = fmt.Appendf(nil, "\r\x1b[%dA\x1b[J", c.last)
	}
	_, err := c.out.Write(append(head, c.Bytes()...))
	c.last = lines
	c.Reset()
	return err
}

// terminalSize is f's columns and rows.
func terminalSize(f *os.File) (cols, rows int, err error) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0, err
	}
	return int(ws.Col), int(ws.Row), nil
}

// consoleFor is the barConsole for w when it is a terminal, else nil (mpb
// then draws lines of its default width and never moves the cursor).
func consoleFor(w io.Writer) *barConsole {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(w) {
		return nil
	}
	return newBarConsole(f)
}
