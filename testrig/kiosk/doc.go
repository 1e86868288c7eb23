// Package kiosk holds the end-to-end test of a kiosk fleet in a real
// browser: termserver with admin tokens, simulated kiosks (termd's
// device.Daemon and link.Client on the emulated HD44780 LCD of
// testrig/lcdemu), and Debian's headless Chromium driven with chromedp
// through the web console (server/console): log in, see the fleet, send
// a notice to a tag, see it on the device's glass and in the console's
// mirror of it, see a stopped device go offline. Screenshots are saved
// as test artifacts (go test -artifacts).
package kiosk
