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
	return &releases.Downloads{Store: s.releases, Gate: s.rt.outside, Log: s.log,
		Channel: func(id string) (releases.DeviceChannel, bool) {
			ch := s.rt.channels[id]
			if ch == nil {
				return releases.DeviceChannel{}, false
			}
			dc := releases.DeviceChannel{Events: ch.events}
			if ch.adapter != nil {
				dc.Auth = ch.adapter
			}
			return dc, true
		}}, nil
}
