package termd

import (
	"slices"
	"testing"

	"termlink/link"
)

// termd lists "choice" only when its board has an input to answer with.
func TestCapabilitiesChoiceOnlyWithInput(t *testing.T) {
	with := capabilities(true, []string{link.CapUpdate})
	without := capabilities(false, []string{link.CapUpdate})
	if !slices.Contains(with, link.CapChoice) || slices.Contains(without, link.CapChoice) {
		t.Fatalf("with input %v, without %v", with, without)
	}
	for _, c := range []string{link.CapNotice, link.CapScreen, link.CapUpdate, link.CapText} {
		if !slices.Contains(without, c) {
			t.Fatalf("%v lacks %s", without, c)
		}
	}
}
