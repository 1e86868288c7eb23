package server

import "termlink/server/releases"

// DeviceReleaseURL is the path a device fetches a release's binary from
// on the server of its channel (an update frame's url).
func DeviceReleaseURL(channelID, version, platform string) string {
	return releases.DeviceURL(channelID, version, platform)
}

// openDownloads is the devices' download route (package releases'
// Downloads), authorized by each channel as its WebSocket authorizes a
// device (wschannel.Adapter.AuthorizeHTTP), refusals through the gate.
func (s *Server) openDownloads() (capability, error) {
	return &releases.Downloads{Store: s.releases, Gate: s.rt.Outside, Log: s.log,
		Channel: func(id string) (releases.DeviceChannel, bool) {
			ch := s.rt.Channels[id]
			if ch == nil {
				return releases.DeviceChannel{}, false
			}
			dc := releases.DeviceChannel{Events: ch.Events}
			if ch.Adapter != nil {
				dc.Auth = ch.Adapter
			}
			return dc, true
		}}, nil
}
