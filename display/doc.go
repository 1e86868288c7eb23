// Package display is the screen model the device draws into, independent of
// the hardware behind it.
//
// # Frames and diffing
//
// A Frame is a rows x cols grid of cells, one rune per cell. The device
// composes a whole Frame and hands it to a Screen (Screen.Draw); the screen
// keeps what the glass shows and sends only what changed. Diff and DiffCells
// compute the changed runs of cells per row, optionally joining two runs that
// are separated by a small gap of unchanged cells when rewriting the gap is
// cheaper than moving the cursor.
//
// # Text layout
//
// Fold maps UTF-8 text to what a Charset can show, Wrap breaks it into lines
// no wider than the screen (at spaces; words longer than a line are broken),
// Paginate groups lines into pages of one screen each, and Layout does all
// three. Every cell holds exactly one rune after Fold, so the width of a line
// is its rune count.
//
// # Character ROMs
//
// ROM describes the character generator ROM of an HD44780U controller, after
// Hitachi's datasheet "HD44780U (LCD-II) Dot Matrix Liquid Crystal Display
// Controller/Driver", ADE-207-272(Z) Rev 0.0 (1999), Table 4 "Correspondence
// between Character Codes and Character Patterns":
//
//   - A00 (Japanese standard font): ASCII 0x20-0x7D except 0x5C, which is the
//     Yen sign (there is no backslash), 0x7E is a right arrow and 0x7F a left
//     arrow (there is no tilde); half-width katakana at 0xA1-0xDF (0xDF, the
//     handakuten, doubles as the degree sign); Greek letters and symbols at
//     0xE0-0xFF (α ä β ε μ σ ρ √ ¢ £ ñ ö θ ∞ Ω ü Σ π 千 万 円 ÷ █).
//   - A02 (European standard font): full ASCII including backslash and tilde,
//     arrows, quotes and shapes at 0x10-0x1F, Cyrillic capitals at 0x80-0x8F,
//     Greek and symbols at 0x90-0x9F, and Latin-1 punctuation and accented
//     letters at 0xA0-0xFF.
//
// Codes 0x00-0x07 (mirrored at 0x08-0x0F) are the eight CGRAM glyphs a driver
// may define; ROM never maps a rune to them.
//
// The datasheet: https://www.sparkfun.com/datasheets/LCD/HD44780.pdf
//
// # Transliteration and the placeholder
//
// Fold keeps every rune the Charset shows as it is. Otherwise it uses a close
// transliteration when every rune of it can be shown: accented Latin letters
// lose their accents (é -> e on A00, which has no é; A02 keeps é), ß -> ss,
// æ -> ae, curly quotes -> straight quotes, en and em dashes -> '-', the
// ellipsis -> "...", full-width ASCII -> ASCII, kana -> half-width katakana
// (A00), Cyrillic -> Latin letters, € -> EUR and so on. Tabs and other spaces
// become ' ', "\r\n" and '\r' become '\n', and other control characters,
// zero-width characters and combining marks are dropped. Anything else (emoji,
// CJK ideographs outside the ROM, …) becomes the Placeholder '?', which both
// ROMs have at 0x3F.
package display
