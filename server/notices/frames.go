package notices

import (
	"errors"
	"fmt"

	"termlink/link"
	"termlink/server/wschannel"
)

// AckFrames is the notice_ack frame's route: from a connection that
// listed "notice" (it was sent notices), taken out of the mailbox.
func AckFrames(ns Mailboxes) []wschannel.FrameRoute {
	return []wschannel.FrameRoute{{Type: link.TypeNoticeAck, Capability: link.CapNotice,
		Handle: func(from wschannel.FrameSource, f link.Frame) error {
			id := f.(*link.NoticeAck).NoticeID
			err := ns.Ack(from.ChannelID, from.PeerID, id)
			switch {
			case errors.Is(err, ErrUnknownNotice):
				return fmt.Errorf("peer %s has no notice %s", from.PeerID, id)
			case err != nil:
				return &wschannel.FrameError{Code: "unavailable", Msg: "notice " + id + " was not recorded (" + err.Error() + "); send it again"}
			}
			return nil
		}}}
}
