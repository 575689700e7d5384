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
// The lines the last frame takes are counted at the width of the frame
// about to be drawn: a terminal that rewraps its lines when made narrower
// (tmux, VTE) holds the last frame on more rows than it was drawn on.
type barConsole struct {
	bytes.Buffer
	out *os.File
	// last is the width of each line of the last frame drawn.
	last []int
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
// last frame. lines is how many lines of it are bars, to be drawn over
// by the next frame.
func (c *barConsole) Flush(lines int) error {
	frame := c.Bytes()
	cols, _, err := terminalSize(c.out)
	if err != nil {
		cols = 0
	}
	var head []byte
	if rows := rowsTaken(c.last, cols); rows > 0 {
		head = fmt.Appendf(nil, "\r\x1b[%dA\x1b[J", rows)
	}
	_, err = c.out.Write(append(head, frame...))
	c.last = lastLineWidths(frame, lines)
	c.Reset()
	return err
}

// rowsTaken is how many terminal rows lines of these widths take at cols
// columns (each at least one; 0 cols: one each).
func rowsTaken(widths []int, cols int) int {
	rows := 0
	for _, w := range widths {
		if cols > 0 && w > cols {
			rows += (w + cols - 1) / cols
		} else {
			rows++
		}
	}
	return rows
}

// lastLineWidths is the width in columns of each of the last n lines of
// frame (its lines end in newlines).
func lastLineWidths(frame []byte, n int) []int {
	lines := bytes.Split(bytes.TrimSuffix(frame, []byte("\n")), []byte("\n"))
	if len(frame) == 0 || n <= 0 {
		return nil
	}
	lines = lines[max(len(lines)-n, 0):]
	widths := make([]int, len(lines))
	for i, l := range lines {
		widths[i] = displayWidth(l)
	}
	return widths
}

// displayWidth counts the columns of a line of the bar: its runes, less
// any ANSI escape sequence (the bar draws none; a log line may).
func displayWidth(l []byte) int {
	n, esc := 0, false
	for _, r := range string(l) {
		switch {
		case esc:
			esc = !(r >= '@' && r <= '~' && r != '[')
		case r == 0x1b:
			esc = true
		default:
			n++
		}
	}
	return n
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
