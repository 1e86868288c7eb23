package fleet

import (
	"termlink/display"
	"termlink/link"
	"termlink/server/registry"
	"termlink/server/wschannel"
)

// ScreenSetter is where a device's screen is mirrored (the registry).
type ScreenSetter interface {
	SetScreen(channelID, peerID string, gen uint64, s registry.Screen) bool
}

// ScreenFrames is the screen frame's route: from a connection that listed
// "screen", its rows, cursor and backlight taken into the registry's
// mirror of the device (a ROM the console can draw, else plain text).
func ScreenFrames(reg ScreenSetter) []wschannel.FrameRoute {
	return []wschannel.FrameRoute{{Type: link.TypeScreen, Capability: link.CapScreen,
		Handle: func(from wschannel.FrameSource, fr link.Frame) error {
			f := fr.(*link.Screen)
			rom := ""
			if r, err := display.ParseROM(f.ROM); err == nil && f.ROM != "" {
				rom = r.String()
			}
			reg.SetScreen(from.ChannelID, from.PeerID, from.Gen, registry.Screen{Rows: f.Rows, ROM: rom,
				CursorRow: f.CursorRow, CursorCol: f.CursorCol, CursorOn: f.CursorOn, Backlight: f.Backlight})
			return nil
		}}}
}
